// Command gengrpc writes gobin's table of grpc-go and golang.org/x/net
// struct field offsets (grpc_offsets_table.go), the fallback of the gRPC
// probes for binaries built without DWARF. For each grpc-go release it
// builds a small program with a gRPC client and server at that version
// (and the x/net it selects), for amd64 and arm64, reads the offsets of
// gobin.GRPCProbeFields from its DWARF with gobin itself, and emits them
// keyed by the version of the module that defines each type. The
// generator fails when two builds disagree on an offset.
//
// Run it through "go generate ./gobin". It needs the Go module proxy and
// minutes.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/timeout-tracer/tracer/gobin"
)

// defaultVersions span grpc-go releases from before the ServerStream split
// (1.66) to the newest on the proxy when the table was last generated.
const defaultVersions = "v1.60.1,v1.64.0,v1.66.0,v1.68.0,v1.72.0,v1.76.0,v1.80.0,v1.85.0"

// probeProgram links a gRPC client and server, so the transport types the
// probes read keep their DWARF.
const probeProgram = `package main

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/health"
)

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	conn, err := grpc.Dial(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	fmt.Println(healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}))
}
`

type entry struct {
	field   gobin.GRPCFieldRef
	version string
	offset  int64
}

func main() {
	out := flag.String("o", "grpc_offsets_table.go", "output file")
	versions := flag.String("versions", defaultVersions, "comma-separated releases of google.golang.org/grpc")
	arches := flag.String("arches", "amd64,arm64", "comma-separated GOARCH values")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("gengrpc: ")

	dir, err := os.MkdirTemp("", "gengrpc")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	entries := map[string]entry{}
	vs := strings.Split(*versions, ",")
	for _, v := range vs {
		for _, arch := range strings.Split(*arches, ",") {
			es, err := offsetsOf(filepath.Join(dir, v), v, arch)
			if err != nil {
				log.Fatalf("%s/%s: %v", v, arch, err)
			}
			for _, e := range es {
				k := fmt.Sprintf("%s@%s %s.%s", e.field.Module, e.version, e.field.Type, e.field.Path)
				if old, dup := entries[k]; dup && old.offset != e.offset {
					log.Fatalf("%s: offset %d in one build, %d in another (grpc %s/%s)", k, old.offset, e.offset, v, arch)
				}
				entries[k] = e
			}
		}
	}
	src, err := render(entries)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %d offsets for grpc %s to %s", len(entries), strings.Join(vs, ", "), *out)
}

// goCmd runs the go command in dir.
func goCmd(dir string, env []string, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false", "GOOS=linux", "CGO_ENABLED=0"}, env...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return nil
}

// offsetsOf builds the probe against grpc-go version v for arch in dir and
// reads its offsets.
func offsetsOf(dir, v, arch string) ([]entry, error) {
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module probe\n\ngo 1.21\n"), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(probeProgram), 0o644); err != nil {
			return nil, err
		}
		log.Printf("resolving grpc %s", v)
		if err := goCmd(dir, nil, "get", "google.golang.org/grpc@"+v); err != nil {
			return nil, err
		}
		if err := goCmd(dir, nil, "mod", "tidy"); err != nil {
			return nil, err
		}
	}
	bin := filepath.Join(dir, "probe-"+arch)
	log.Printf("building probe with grpc %s for %s", v, arch)
	if err := goCmd(dir, []string{"GOARCH=" + arch}, "build", "-o", bin, "."); err != nil {
		return nil, err
	}
	b, err := gobin.Open(bin)
	if err != nil {
		return nil, fmt.Errorf("open probe: %w", err)
	}
	defer b.Close()
	versions := map[string]string{}
	for _, m := range b.Modules {
		versions[m.Path] = m.Version
	}
	if versions["google.golang.org/grpc"] != v {
		return nil, fmt.Errorf("probe links grpc %q, want %s", versions["google.golang.org/grpc"], v)
	}
	var entries []entry
	for _, f := range gobin.GRPCProbeFields() {
		mv, linked := versions[f.Module]
		if !linked {
			return nil, fmt.Errorf("module %s is not linked", f.Module)
		}
		off, err := b.DWARFFieldOffset(f.Type, f.Path)
		if errors.Is(err, gobin.ErrNotFound) {
			log.Printf("grpc %s: %s.%s does not exist in %s@%s; left out", v, f.Type, f.Path, f.Module, mv)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s.%s: %w", f.Type, f.Path, err)
		}
		entries = append(entries, entry{f, mv, off})
	}
	return entries, nil
}

func render(entries map[string]entry) ([]byte, error) {
	keys := make([]string, 0, len(entries))
	versions := map[string]map[string]bool{}
	for k, e := range entries {
		keys = append(keys, k)
		if versions[e.field.Module] == nil {
			versions[e.field.Module] = map[string]bool{}
		}
		versions[e.field.Module][e.version] = true
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	buf.WriteString("// Code generated by go run ./internal/gengrpc; DO NOT EDIT.\n\n")
	buf.WriteString("package gobin\n\n")
	buf.WriteString("// grpcTableVersions lists, by module, the versions the table holds.\n")
	buf.WriteString("func grpcTableVersions() map[string][]string {\n\treturn map[string][]string{\n")
	mods := make([]string, 0, len(versions))
	for m := range versions {
		mods = append(mods, m)
	}
	sort.Strings(mods)
	for _, m := range mods {
		var vs []string
		for v := range versions[m] {
			vs = append(vs, v)
		}
		sort.Strings(vs) // stable output; gobin orders them by semver itself
		fmt.Fprintf(&buf, "\t\t%q: %#v,\n", m, vs)
	}
	buf.WriteString("\t}\n}\n\n")
	buf.WriteString("// grpcTableOffset returns the generated offset for k.\n")
	buf.WriteString("func grpcTableOffset(k otelKey) (int64, bool) {\n\tswitch k {\n")
	for _, k := range keys {
		e := entries[k]
		fmt.Fprintf(&buf, "\tcase otelKey{%q, %q, %q, %q}:\n\t\treturn %d, true\n", e.field.Module, e.version, e.field.Type, e.field.Path, e.offset)
	}
	buf.WriteString("\t}\n\treturn 0, false\n}\n")
	src, err := format.Source(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("format table: %w", err)
	}
	return src, nil
}
