package gobin

//go:generate go run ./internal/genlayouts -write-seed

import (
	"embed"
	"fmt"
	"sync"

	"github.com/timeout-tracer/tracer/gobin/internal/layout"
)

// The struct layouts, for binaries built without DWARF: one file per family
// ("go", "otel", "grpc"), written by ./internal/genlayouts (docs/layouts.md).
//
//go:embed layouts/*.json
var layoutFiles embed.FS

// layoutFamilies are the families gobin reads; the generator writes the same.
var layoutFamilies = []string{"go", "otel", "grpc"}

// layoutTables parses the embedded files once, on first use. It is the
// package's one piece of shared state: read-only data compiled into the
// binary, so sharing it is safe, and parsing it once keeps lookups to map
// reads.
var layoutTables = sync.OnceValues(func() (map[string]*layout.Table, error) {
	tables := map[string]*layout.Table{}
	for _, fam := range layoutFamilies {
		data, err := layoutFiles.ReadFile("layouts/" + fam + ".json")
		if err != nil {
			return nil, fmt.Errorf("struct layouts: %w", err)
		}
		t, err := layout.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("struct layouts %s.json: %w", fam, err)
		}
		if t.Family() != fam {
			return nil, fmt.Errorf("struct layouts %s.json: family %q", fam, t.Family())
		}
		tables[fam] = t
	}
	return tables, nil
})

// layoutTable returns the parsed layouts of a family. An error means the
// embedded data is broken, which the package's tests rule out.
func layoutTable(family string) (*layout.Table, error) {
	tables, err := layoutTables()
	if err != nil {
		return nil, err
	}
	return tables[family], nil
}

// moduleTableOffset resolves a field of a module family ("otel", "grpc")
// for a module version from the layouts: exactly, or borrowed across a
// bracket of versions whose layouts of the type agree (layout.Table.Lookup).
// It says which version's layout it used; the error wraps ErrNoOffsets when
// the layouts cannot vouch for the version.
func moduleTableOffset(family, module, version, typ, path string) (int64, string, error) {
	t, err := layoutTable(family)
	if err != nil {
		return 0, "", fmt.Errorf("resolve %s.%s: %w", typ, path, err)
	}
	off, used, err := t.Lookup(module, version, typ, path)
	if err != nil {
		return 0, "", fmt.Errorf("resolve %s.%s: %w: %v", typ, path, ErrNoOffsets, err)
	}
	return off, used, nil
}
