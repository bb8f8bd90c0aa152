package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/timeout-tracer/tracer/gobin"
	"github.com/timeout-tracer/tracer/gobin/internal/layout"
)

// probe is one build: a family's program at one version (a toolchain for
// family go) for one architecture.
type probe struct {
	fam       *family
	version   string // module version, or the toolchain of family go
	arch      string
	toolchain string // GOTOOLCHAIN
	require   []string
}

func (p probe) String() string { return p.fam.name + " " + p.version + "/" + p.arch }

// record is one measured offset.
type record struct {
	Module    string `json:"module,omitempty"`
	Version   string `json:"version"`
	Arch      string `json:"arch,omitempty"`
	Toolchain string `json:"toolchain,omitempty"`
	Type      string `json:"type"`
	Path      string `json:"path"`
	Offset    int64  `json:"offset"`
}

type generator struct {
	tmp   string
	cache *cache // nil: off
	// seed: the committed results (gobin/layouts/probes), read after the
	// cache under the same keys; nil: off or no cache (no keys).
	seed                *cache
	hits, seeded, built int
	used                map[string][]record // key -> result, of every probe measured
}

func newGenerator(cacheDir, seedDir string) (*generator, error) {
	tmp, err := os.MkdirTemp("", "genlayouts")
	if err != nil {
		return nil, err
	}
	g := &generator{tmp: tmp, used: map[string][]record{}}
	if cacheDir != "off" {
		if g.cache, err = openCache(cacheDir); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
		if seedDir != "off" {
			g.seed = &cache{dir: seedDir, code: g.cache.code}
		}
	}
	return g, nil
}

func (g *generator) close() { os.RemoveAll(g.tmp) }

// layouts measures every probe of spec and gathers the offsets by layout.
// Two probes that measure the same field of the same layout must agree.
func (g *generator) layouts(fam *family, spec layout.Spec) ([]layout.Layout, error) {
	var probes []probe
	if fam.perRelease {
		for _, tc := range spec.Toolchains {
			for _, arch := range spec.Arches {
				probes = append(probes, probe{fam: fam, version: tc, arch: arch, toolchain: tc})
			}
		}
	} else {
		for _, v := range spec.Versions {
			for _, arch := range spec.Arches {
				probes = append(probes, probe{fam: fam, version: v, arch: arch, toolchain: spec.Toolchain, require: spec.Require})
			}
		}
	}
	byKey := map[layout.Key]*layout.Layout{}
	from := map[string]probe{}
	var order []layout.Key
	for _, p := range probes {
		recs, err := g.measure(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		for _, r := range recs {
			k := layout.Key{Module: r.Module, Version: r.Version, Arch: r.Arch}
			l := byKey[k]
			if l == nil {
				l = &layout.Layout{Module: r.Module, Version: r.Version, Arch: r.Arch, Toolchain: r.Toolchain, Types: map[string]map[string]int64{}}
				byKey[k] = l
				order = append(order, k)
			}
			if l.Types[r.Type] == nil {
				l.Types[r.Type] = map[string]int64{}
			}
			id := fmt.Sprintf("%s@%s %s.%s", r.Module, r.Version, r.Type, r.Path)
			if old, seen := l.Types[r.Type][r.Path]; seen && old != r.Offset {
				return nil, fmt.Errorf("%s: offset %d in %s, %d in %s", id, old, from[id], r.Offset, p)
			}
			l.Types[r.Type][r.Path] = r.Offset
			from[id] = p
		}
	}
	out := make([]layout.Layout, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	return out, nil
}

// measure returns the offsets of one probe, from the cache or by building it.
func (g *generator) measure(p probe) ([]record, error) {
	key, err := g.cacheKey(p)
	if err != nil {
		return nil, err
	}
	if recs, ok := g.cache.get(key); ok {
		g.hits++
		g.used[key] = recs
		return recs, nil
	}
	if recs, ok := g.seed.get(key); ok {
		g.seeded++
		g.used[key] = recs
		if err := g.cache.put(key, recs); err != nil {
			log.Printf("%s: not cached: %v", p, err)
		}
		return recs, nil
	}
	start := time.Now()
	recs, err := g.build(p)
	if err != nil {
		return nil, err
	}
	g.built++
	if key != "" {
		g.used[key] = recs
	}
	log.Printf("%s: built and measured in %s", p, time.Since(start).Round(100*time.Millisecond))
	if err := g.cache.put(key, recs); err != nil {
		log.Printf("%s: not cached: %v", p, err)
	}
	return recs, nil
}

// goCmd runs the go command in dir for the probe's toolchain and arch.
func goCmd(dir string, p probe, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false", "GOOS=linux", "CGO_ENABLED=0",
		"GOTOOLCHAIN="+p.toolchain, "GOARCH="+p.arch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return nil
}

// build builds the probe and reads its offsets from its DWARF.
func (g *generator) build(p probe) ([]record, error) {
	dir := filepath.Join(g.tmp, p.fam.name, p.version)
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(p.fam.goMod), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(p.fam.main), 0o644); err != nil {
			return nil, err
		}
		if len(p.require) > 0 {
			get := []string{"get"}
			for _, m := range p.require {
				get = append(get, m+"@"+p.version)
			}
			if err := goCmd(dir, p, get...); err != nil {
				return nil, err
			}
			if err := goCmd(dir, p, "mod", "tidy"); err != nil {
				return nil, err
			}
		}
	}
	bin := filepath.Join(dir, "probe-"+p.arch)
	log.Printf("%s: building", p)
	if err := goCmd(dir, p, "build", "-o", bin, "."); err != nil {
		return nil, err
	}
	b, err := gobin.Open(bin)
	if err != nil {
		return nil, fmt.Errorf("open probe: %w", err)
	}
	defer b.Close()
	if b.Arch != p.arch {
		return nil, fmt.Errorf("probe is for %s, want %s", b.Arch, p.arch)
	}
	linked := map[string]string{}
	for _, m := range b.Modules {
		linked[m.Path] = m.Version
	}
	rel := ""
	if p.fam.perRelease {
		if b.GoVersion != p.toolchain {
			return nil, fmt.Errorf("probe was built by %s, want %s (GOTOOLCHAIN ignored?)", b.GoVersion, p.toolchain)
		}
		rel, _ = release(p.toolchain)
	}
	for _, m := range p.require {
		if linked[m] != p.version {
			return nil, fmt.Errorf("probe links %s %q, want %s", m, linked[m], p.version)
		}
	}
	var recs []record
	for _, f := range p.fam.fields() {
		r := record{Module: f.module, Type: f.typ, Path: f.path}
		if f.module == "" {
			r.Version, r.Arch, r.Toolchain = rel, p.arch, p.toolchain
		} else {
			mv, ok := linked[f.module]
			if !ok && p.fam.optional[f.module] {
				log.Printf("%s: %s is not linked; %s.%s left out", p, f.module, f.typ, f.path)
				continue
			}
			if !ok {
				return nil, fmt.Errorf("module %s is not linked", f.module)
			}
			r.Version = mv
		}
		off, err := b.DWARFFieldOffset(f.typ, f.path)
		if errors.Is(err, gobin.ErrNotFound) {
			log.Printf("%s: %s.%s does not exist in %s@%s; left out", p, f.typ, f.path, f.module, r.Version)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s.%s: %w", f.typ, f.path, err)
		}
		r.Offset = off
		recs = append(recs, r)
	}
	return recs, nil
}

// release returns the "MAJOR.MINOR" of a toolchain name goMAJOR.MINOR.PATCH.
func release(tc string) (string, bool) {
	parts := strings.Split(strings.TrimPrefix(tc, "go"), ".")
	if !strings.HasPrefix(tc, "go") || len(parts) != 3 {
		return "", false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return "", false
		}
	}
	return parts[0] + "." + parts[1], true
}

// jsonUnmarshalStrict decodes one JSON value, refusing unknown fields.
func jsonUnmarshalStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
