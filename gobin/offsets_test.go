package gobin

import (
	"debug/dwarf"
	"errors"
	"strings"
	"testing"
)

// TestFieldOffsets proves the generated table agrees with DWARF for the
// toolchain at hand, that binaries without DWARF get the table's values,
// and that an uncovered Go version is refused with ErrNoOffsets.
func TestFieldOffsets(t *testing.T) {
	dwarfByArch := map[string]map[FieldRef]int64{}
	forEachVariant(t, func(t *testing.T, v variant, b *Binary) {
		release, _ := releaseOf(b.GoVersion)
		_, minor, _ := goRelease(b.GoVersion)
		for _, f := range ProbeFields() {
			if !f.InRelease(minor) {
				if _, err := b.FieldOffset(f.Type, f.Path); err == nil {
					t.Errorf("FieldOffset(%s, %s) resolved in go1.%d, outside its releases", f.Type, f.Path, minor)
				}
				continue
			}
			got, err := b.FieldOffset(f.Type, f.Path)
			if err != nil {
				t.Errorf("FieldOffset(%s, %s): %v", f.Type, f.Path, err)
				continue
			}
			table, ok := goLayoutOffset(t, release, v.goarch, f)
			if !ok {
				t.Errorf("table has no %s.%s for go%s/%s; run go generate", f.Type, f.Path, release, v.goarch)
			} else if got != table {
				t.Errorf("%s.%s: FieldOffset %d, table %d", f.Type, f.Path, got, table)
			}
			_, derr := b.DWARFFieldOffset(f.Type, f.Path)
			if v.dwarf != (derr == nil) {
				t.Errorf("DWARFFieldOffset(%s, %s) error %v, variant has DWARF=%v", f.Type, f.Path, derr, v.dwarf)
			}
			if v.dwarf {
				if dwarfByArch[v.goarch] == nil {
					dwarfByArch[v.goarch] = map[FieldRef]int64{}
				}
				dwarfByArch[v.goarch][f] = got
			}
		}
		if _, err := b.FieldOffset("context.timerCtx", "noSuchField"); err == nil {
			t.Error("FieldOffset of a missing field succeeded")
		}
	})
	// Sanity of the values themselves, from the Go source: a timerCtx
	// starts with its cancelCtx, whose first field is the parent Context.
	for arch, offs := range dwarfByArch {
		if offs[FieldRef{"context.timerCtx", "cancelCtx.Context"}] != 0 || offs[FieldRef{"time.Time", "ext"}] != 8 {
			t.Errorf("%s offsets look wrong: %v", arch, offs)
		}
	}

	b := openVariant(t, variantNamed(t, "stripped"))
	b.GoVersion = "go1.99.1"
	if _, err := b.FieldOffset("runtime.g", "goid"); !errors.Is(err, ErrNoOffsets) {
		t.Errorf("FieldOffset for an uncovered version: %v, want ErrNoOffsets", err)
	}
}

// TestDWARFRuntimeUnitsFirst: the struct index reads only the units named
// "runtime"; on each variant with DWARF (external linking's included) it
// holds every Go struct type of the whole DWARF, at the same entries.
func TestDWARFRuntimeUnitsFirst(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant, b *Binary) {
		if !v.dwarf {
			return
		}
		idx, err := b.dwarfTypes()
		if err != nil {
			t.Fatal(err)
		}
		all := &dwarfIndex{data: idx.data, structs: map[string]dwarf.Offset{}}
		if err := all.index(func(string) bool { return true }); err != nil {
			t.Fatal(err)
		}
		for name, at := range idx.structs {
			if all.structs[name] != at {
				t.Errorf("%s: %#x in the runtime units, %#x in all units", name, at, all.structs[name])
			}
		}
		// A cgo binary's C units hold C structs (sockaddr_at), which no
		// probe reads; Go's own are all in the runtime units.
		for name := range all.structs {
			if _, ok := idx.structs[name]; !ok && (!v.cgo || strings.Contains(name, ".")) {
				t.Errorf("struct %s not in the runtime units", name)
			}
		}
		t.Logf("%d structs in the runtime units, %d in all units", len(idx.structs), len(all.structs))
	})
}

// TestPrefetchDWARF: the DWARF loads in the background while the symbol
// and function tables are read, answers the same, and is released with
// the rest (go test -race checks the locking).
func TestPrefetchDWARF(t *testing.T) {
	b := openVariant(t, variantNamed(t, "plain"))
	want, err := b.DWARFFieldOffset("context.timerCtx", "deadline")
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	wait := b.PrefetchDWARF()
	if _, err := b.Func("context.WithDeadlineCause"); err != nil {
		t.Error(err)
	}
	got, err := b.FieldOffset("context.timerCtx", "deadline")
	wait()
	if err != nil || got != want {
		t.Errorf("FieldOffset during the prefetch: %d, %v; want %d", got, err, want)
	}
	b.Release()
	if b.dwarf != nil || b.dwarfDone {
		t.Error("the prefetched DWARF survived Release")
	}
	if got, err := b.FieldOffset("context.timerCtx", "deadline"); err != nil || got != want {
		t.Errorf("FieldOffset after Release: %d, %v; want %d", got, err, want)
	}
}
