// Package layout is the format of gobin's struct layouts (the files
// gobin/layouts/<family>.json) and their lookup: the byte offsets of the
// struct fields the probes read, per Go release or module version, for
// binaries built without DWARF. One file per family: "go" (the Go runtime
// and standard library, per release and architecture), "otel"
// (OpenTelemetry Go, per module version) and "grpc" (grpc-go and
// golang.org/x/net, per module version).
//
// The generator (gobin/internal/genlayouts) writes the files with Marshal
// from the input each holds (Spec); gobin embeds them and parses each once
// with Parse. docs/layouts.md describes the format.
package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// File is one family's file.
type File struct {
	// Family is "go", "otel" or "grpc": the file's base name.
	Family string `json:"family"`
	// About says what the file holds, for its reader.
	About string `json:"about"`
	// Generate is the generator's input, the one part edited by hand.
	Generate Spec `json:"generate"`
	// Layouts is the generator's output, sorted by module, version and
	// architecture.
	Layouts []Layout `json:"layouts"`
}

// Spec says what the generator builds and measures.
type Spec struct {
	// Toolchains (family go) are the Go toolchains the probe program is
	// built with, one patch release per minor release: each gives the
	// layouts of its release.
	Toolchains []string `json:"toolchains,omitempty"`
	// Require (module families) are the modules the probe program
	// requires, all set to each of Versions in turn.
	Require  []string `json:"require,omitempty"`
	Versions []string `json:"versions,omitempty"`
	// Toolchain (module families) is the Go toolchain (GOTOOLCHAIN) that
	// builds those probes, so the output does not depend on the Go at hand.
	Toolchain string `json:"toolchain,omitempty"`
	// Arches are the GOARCH values built. A module family's offsets must
	// agree across them (the generator fails otherwise) and are stored once.
	Arches []string `json:"arches"`
}

// Layout holds the offsets of one module version (or Go release) on one
// architecture (or all).
type Layout struct {
	// Module defines the types; "" for the Go runtime and standard library.
	Module string `json:"module,omitempty"`
	// Version is the module version ("v1.60.1"), or the Go release ("1.21").
	Version string `json:"version"`
	// Arch is the GOARCH, for a family whose offsets depend on it; "" for
	// every architecture.
	Arch string `json:"arch,omitempty"`
	// Toolchain (family go) is the toolchain the release was measured with.
	Toolchain string `json:"toolchain,omitempty"`
	// Types maps a struct's name as in DWARF ("context.timerCtx") to its
	// fields' dotted paths ("cancelCtx.Context") and byte offsets. A field
	// the version lacks is absent.
	Types map[string]map[string]int64 `json:"types"`
}

// Key names a layout.
type Key struct {
	Module, Version, Arch string
}

// Key returns l's key.
func (l *Layout) Key() Key { return Key{l.Module, l.Version, l.Arch} }

// Table is one parsed family, for lookups.
type Table struct {
	family     string
	toolchains []string
	layouts    map[Key]*Layout
	versions   map[string][]string // by module, ascending
}

// Parse decodes and checks one family's file: unknown fields, a layout
// without a version or types, a negative offset and a key given twice are
// errors.
func Parse(data []byte) (*Table, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("decode layouts: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("decode layouts: data after the object")
	}
	if f.Family == "" {
		return nil, fmt.Errorf("decode layouts: no family")
	}
	t := &Table{family: f.Family, toolchains: f.Generate.Toolchains, layouts: map[Key]*Layout{}, versions: map[string][]string{}}
	for i := range f.Layouts {
		l := &f.Layouts[i]
		if l.Version == "" || len(l.Types) == 0 {
			return nil, fmt.Errorf("%s layouts: entry %d has no version or no types", f.Family, i)
		}
		for typ, fields := range l.Types {
			for path, off := range fields {
				if off < 0 || typ == "" || path == "" {
					return nil, fmt.Errorf("%s layouts: %s %s.%s: bad entry (offset %d)", f.Family, l.Version, typ, path, off)
				}
			}
		}
		if _, dup := t.layouts[l.Key()]; dup {
			return nil, fmt.Errorf("%s layouts: %+v given twice", f.Family, l.Key())
		}
		t.layouts[l.Key()] = l
		if !slices.Contains(t.versions[l.Module], l.Version) {
			t.versions[l.Module] = append(t.versions[l.Module], l.Version)
		}
	}
	for _, vs := range t.versions {
		slices.SortFunc(vs, CompareVersions)
	}
	return t, nil
}

// Family returns the family's name.
func (t *Table) Family() string { return t.family }

// Toolchains returns the toolchains the family go was generated with.
func (t *Table) Toolchains() []string { return slices.Clone(t.toolchains) }

// Versions returns the versions of module the table holds, ascending.
func (t *Table) Versions(module string) []string { return slices.Clone(t.versions[module]) }

// Keys returns the keys of every layout, sorted as in the file.
func (t *Table) Keys() []Key {
	keys := slices.Collect(maps.Keys(t.layouts))
	slices.SortFunc(keys, compareKeys)
	return keys
}

// Layout returns the layout under k.
func (t *Table) Layout(k Key) (*Layout, bool) {
	l, ok := t.layouts[k]
	return l, ok
}

// Offset returns the offset of typ.path in the layout k, exactly.
func (t *Table) Offset(k Key, typ, path string) (int64, bool) {
	l, ok := t.layouts[k]
	if !ok {
		return 0, false
	}
	off, ok := l.Types[typ][path]
	return off, ok
}

// Lookup resolves typ.path for a module at a version of a module family
// and says which version's layout it used. A version the table lacks
// borrows the offsets of the nearest lower version only when the nearest
// higher one has the same layout of typ (the same fields at the same
// offsets): the struct did not change across the bracket. Otherwise the
// error says why there is no offset.
func (t *Table) Lookup(module, version, typ, path string) (int64, string, error) {
	none := func(why string) (int64, string, error) {
		return 0, "", fmt.Errorf("%s@%q %s (table: %s)", module, version, why, strings.Join(t.versions[module], ", "))
	}
	if off, ok := t.Offset(Key{Module: module, Version: version}, typ, path); ok {
		return off, version, nil
	}
	if _, ok := parseSemver(version); !ok {
		return none("is not a release version")
	}
	var lo, hi string
	for _, v := range t.versions[module] { // ascending
		switch c := compareSemver(v, version); {
		case c < 0:
			lo = v
		case c > 0 && hi == "":
			hi = v
		}
	}
	if lo == "" || hi == "" {
		return none("is outside the table")
	}
	a := t.layouts[Key{Module: module, Version: lo}].Types[typ]
	z := t.layouts[Key{Module: module, Version: hi}].Types[typ]
	if !maps.Equal(a, z) {
		return none(fmt.Sprintf("lies between %s and %s, whose %s layouts differ", lo, hi, typ))
	}
	off, ok := a[path]
	if !ok {
		return none(fmt.Sprintf("lies between %s and %s, which lack %s.%s", lo, hi, typ, path))
	}
	return off, lo, nil
}

// Marshal encodes f as its file: layouts sorted, maps sorted by
// encoding/json, two-space indent, a final newline. The same File always
// gives the same bytes.
func Marshal(f *File) ([]byte, error) {
	g := *f
	g.Layouts = slices.Clone(f.Layouts)
	slices.SortFunc(g.Layouts, func(a, b Layout) int { return compareKeys(a.Key(), b.Key()) })
	out, err := json.MarshalIndent(&g, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode %s layouts: %w", f.Family, err)
	}
	return append(out, '\n'), nil
}

func compareKeys(a, b Key) int {
	if c := strings.Compare(a.Module, b.Module); c != 0 {
		return c
	}
	if c := CompareVersions(a.Version, b.Version); c != 0 {
		return c
	}
	return strings.Compare(a.Arch, b.Arch)
}

// CompareVersions orders module versions by semantic-versioning precedence
// and Go releases ("1.9" < "1.21") numerically; anything else, and mixed
// kinds, as strings.
func CompareVersions(a, b string) int {
	_, aok := parseSemver(a)
	_, bok := parseSemver(b)
	if aok && bok {
		return compareSemver(a, b)
	}
	ra, aok := parseRelease(a)
	rb, bok := parseRelease(b)
	if aok && bok {
		if ra[0] != rb[0] {
			return boolCmp(ra[0] > rb[0], ra[0] < rb[0])
		}
		return boolCmp(ra[1] > rb[1], ra[1] < rb[1])
	}
	return strings.Compare(a, b)
}

// parseRelease parses a Go release "MAJOR.MINOR".
func parseRelease(v string) ([2]uint64, bool) {
	major, minor, ok := strings.Cut(v, ".")
	x, err1 := strconv.ParseUint(major, 10, 64)
	y, err2 := strconv.ParseUint(minor, 10, 64)
	return [2]uint64{x, y}, ok && err1 == nil && err2 == nil
}
