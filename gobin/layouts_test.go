package gobin

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/timeout-tracer/tracer/gobin/internal/layout"
)

// goLayoutOffset reads the go family's layouts directly.
func goLayoutOffset(t testing.TB, release, arch string, f FieldRef) (int64, bool) {
	t.Helper()
	tab, err := layoutTable("go")
	if err != nil {
		t.Fatal(err)
	}
	return tab.Offset(layout.Key{Version: release, Arch: arch}, f.Type, f.Path)
}

// probeFieldsOf lists a family's fields as module, type and path.
func probeFieldsOf(family string) [][3]string {
	var fs [][3]string
	switch family {
	case "go":
		for _, f := range ProbeFields() {
			fs = append(fs, [3]string{"", f.Type, f.Path})
		}
	case "otel":
		for _, f := range OTelProbeFields() {
			fs = append(fs, [3]string{f.Module, f.Type, f.Path})
		}
	case "grpc":
		for _, f := range GRPCProbeFields() {
			fs = append(fs, [3]string{f.Module, f.Type, f.Path})
		}
	}
	return fs
}

// TestLayoutFiles checks the embedded layouts without regenerating them
// (make layouts-check does that): each file parses, is in the form the
// generator writes (sorted, indented), has a layout for everything its
// generate section asks for and nothing else, and holds exactly the fields
// the probes read — a field added to a probe list without regenerating
// fails here.
func TestLayoutFiles(t *testing.T) {
	tables, err := layoutTables()
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 3 {
		t.Fatalf("%d families", len(tables))
	}
	for _, fam := range layoutFamilies {
		t.Run(fam, func(t *testing.T) {
			data, _ := layoutFiles.ReadFile("layouts/" + fam + ".json")
			var f layout.File
			if err := json.Unmarshal(data, &f); err != nil {
				t.Fatal(err)
			}
			if again, err := layout.Marshal(&f); err != nil || !bytes.Equal(again, data) {
				t.Errorf("not in the generator's form (sorted, indented): regenerate with go generate ./gobin (%v)", err)
			}
			var want []layout.Key
			if fam == "go" {
				for _, tc := range f.Generate.Toolchains {
					rel, _ := releaseOf(tc)
					for _, arch := range f.Generate.Arches {
						want = append(want, layout.Key{Version: rel, Arch: arch})
						if l, ok := tables[fam].Layout(layout.Key{Version: rel, Arch: arch}); ok && l.Toolchain != tc {
							t.Errorf("go%s/%s measured with %s, generate asks for %s", rel, arch, l.Toolchain, tc)
						}
					}
				}
			} else {
				for _, v := range f.Generate.Versions {
					for _, m := range f.Generate.Require {
						want = append(want, layout.Key{Module: m, Version: v})
					}
				}
			}
			keys := tables[fam].Keys()
			for _, k := range want {
				if !slices.Contains(keys, k) {
					t.Errorf("no layout for %+v, which the generate section asks for", k)
				}
			}
			probed := probeFieldsOf(fam)
			seen := map[[3]string]bool{}
			for _, k := range keys {
				l, _ := tables[fam].Layout(k)
				if fam == "go" && !slices.Contains(want, k) {
					t.Errorf("layout %+v is not in the generate section", k)
				}
				for typ, fields := range l.Types {
					for path := range fields {
						f := [3]string{k.Module, typ, path}
						if !slices.Contains(probed, f) {
							t.Errorf("%+v: %s.%s is not a field the probes read", k, typ, path)
						}
						seen[f] = true
					}
				}
			}
			for _, f := range probed {
				if !seen[f] {
					t.Errorf("%s.%s (%s) is in no layout: regenerate with go generate ./gobin", f[1], f[2], f[0])
				}
			}
		})
	}
}

// TestFieldOffsetFromLayouts: a binary without DWARF gets the offsets of
// its Go release, whatever the patch level or pre-release, on its
// architecture; a release or architecture the layouts lack gets
// ErrNoOffsets, as before the layouts were data.
func TestFieldOffsetFromLayouts(t *testing.T) {
	b := openVariant(t, variantNamed(t, "stripped"))
	goid := FieldRef{"runtime.g", "goid"}
	for _, v := range []string{"go1.21.2", "go1.22rc1", "go1.27.3", "go1.25.0 X:nodwarf5"} {
		b.GoVersion = v
		rel, _ := releaseOf(v)
		want, ok := goLayoutOffset(t, rel, b.Arch, goid)
		if !ok {
			t.Fatalf("no layout for go%s/%s", rel, b.Arch)
		}
		if got, err := b.FieldOffset(goid.Type, goid.Path); err != nil || got != want {
			t.Errorf("%s: goid at %d, %v; want %d", v, got, err, want)
		}
	}
	for _, tc := range []struct{ version, arch string }{{"go1.20.14", "amd64"}, {"go1.99.1", "amd64"}, {"go1.26.8", "riscv64"}, {"gopher", "amd64"}} {
		b.GoVersion, b.Arch = tc.version, tc.arch
		if off, err := b.FieldOffset(goid.Type, goid.Path); !errors.Is(err, ErrNoOffsets) {
			t.Errorf("%s/%s: %d, %v; want ErrNoOffsets", tc.version, tc.arch, off, err)
		}
	}
}

// BenchmarkFieldOffsetLayouts measures a lookup in the go layouts, the
// path of every field of a binary without DWARF.
func BenchmarkFieldOffsetLayouts(b *testing.B) {
	tab, err := layoutTable("go")
	if err != nil {
		b.Fatal(err)
	}
	k := layout.Key{Version: "1.24", Arch: "arm64"}
	for b.Loop() {
		if _, ok := tab.Offset(k, "net/http.persistConn", "conn"); !ok {
			b.Fatal("no entry")
		}
	}
}
