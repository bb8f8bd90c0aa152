// Command genlayouts writes gobin's struct layouts, gobin/layouts/<family>.json,
// the fallback for binaries built without DWARF. Each file's "generate"
// section says what to build: for family go, a small probe program with each
// Go toolchain (downloaded from the module proxy through GOTOOLCHAIN); for
// families otel and grpc, a probe that links OpenTelemetry Go or grpc-go at
// each version. It builds every probe for every architecture, reads the
// offsets of the fields gobin's probes use (gobin.ProbeFields,
// OTelProbeFields, GRPCProbeFields) from the probe's DWARF with gobin itself,
// and writes the layouts section, sorted.
//
// Run it through "go generate ./gobin" (or make layouts-check, which writes
// into a temporary directory and compares). Cold, it needs the Go module
// proxy and many minutes; each probe's result is cached under a key of
// everything that determines it (see cache.go), so a run whose inputs did not
// change takes seconds.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/timeout-tracer/tracer/gobin/internal/layout"
)

func main() {
	in := flag.String("in", "layouts", "directory of the layout files whose generate sections are read")
	out := flag.String("out", "", "directory to write the layout files to (default: -in)")
	only := flag.String("family", "", "comma-separated families to generate (default: all: "+strings.Join(familyNames(), ",")+")")
	cacheDir := flag.String("cache", defaultCacheDir(), `directory of cached probe results; "off" to build every probe`)
	seedDir := flag.String("seed", filepath.Join("layouts", "probes"), `directory of committed probe results, read after the cache (under the same keys); "off" for none`)
	writeSeed := flag.Bool("write-seed", false, "write every probe's result into -seed, and remove the entries no probe used (go generate does)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("genlayouts: ")
	if *out == "" {
		*out = *in
	}
	names := familyNames()
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	g, err := newGenerator(*cacheDir, *seedDir)
	if err != nil {
		log.Fatal(err)
	}
	defer g.close()
	for _, name := range names {
		fam, ok := families[name]
		if !ok {
			log.Fatalf("unknown family %q (have %s)", name, strings.Join(familyNames(), ", "))
		}
		if err := g.generate(fam, filepath.Join(*in, name+".json"), filepath.Join(*out, name+".json")); err != nil {
			log.Fatalf("%s: %v", name, err)
		}
	}
	log.Printf("%d probes: %d from the cache, %d from the committed results, %d built", g.hits+g.seeded+g.built, g.hits, g.seeded, g.built)
	switch {
	case *writeSeed && *only != "":
		log.Fatal("-write-seed needs every family (no -family)")
	case *writeSeed:
		n, removed, err := g.writeSeed()
		if err != nil {
			log.Fatal(err)
		}
		log.Printf("wrote %d probe results to %s, removed %d", n, *seedDir, removed)
	case g.built > 0 && g.seed != nil:
		log.Printf("note: %d probes were not in %s (their inputs changed since the last 'go generate ./gobin'): run it and commit the results, so that a fresh clone checks them without building", g.built, *seedDir)
	}
}

func familyNames() []string {
	var names []string
	for name := range families {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// generate reads the spec of a family from in and writes its file to out.
func (g *generator) generate(fam *family, in, out string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return fmt.Errorf("read the generate section: %w", err)
	}
	// Only the spec is read: a stale or hand-edited layouts section is
	// replaced, not merged.
	var f layout.File
	if err := jsonUnmarshalStrict(data, &f); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if f.Family != fam.name {
		return fmt.Errorf("%s: family %q, want %q", in, f.Family, fam.name)
	}
	spec := f.Generate
	if err := fam.check(spec); err != nil {
		return fmt.Errorf("%s: generate: %w", in, err)
	}
	layouts, err := g.layouts(fam, spec)
	if err != nil {
		return err
	}
	src, err := layout.Marshal(&layout.File{Family: fam.name, About: fam.about, Generate: spec, Layouts: layouts})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, src, 0o644); err != nil {
		return err
	}
	log.Printf("wrote %d layouts to %s", len(layouts), out)
	return nil
}
