package gobin

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// dwarfIndex maps struct type names to their DWARF entry offsets.
type dwarfIndex struct {
	structs map[string]dwarf.Offset

	mu   sync.Mutex // dwarf.Data caches types without locking
	data *dwarf.Data
}

// errNoDWARF means the binary was linked without DWARF (-ldflags=-w or -s).
var errNoDWARF = errors.New("no DWARF debug information")

// errTypeNotInDWARF: the binary has DWARF, without the type (the linker
// keeps a type's itab where no live function's variable has the type:
// Go 1.22's context.withoutCancelCtx in a program of ours). Wrapped with
// ErrNotFound.
var errTypeNotInDWARF = errors.New("type not in DWARF")

// dwarfTypes loads the DWARF data and indexes its struct types once.
func (b *Binary) dwarfTypes() (*dwarfIndex, error) {
	b.dwarfMu.Lock()
	defer b.dwarfMu.Unlock()
	if !b.dwarfDone {
		b.dwarf, b.dwarfErr = b.loadDWARF()
		b.dwarfDone = true
	}
	return b.dwarf, b.dwarfErr
}

func (b *Binary) loadDWARF() (idx *dwarfIndex, err error) {
	defer recoverCorrupt(&err, "parse DWARF")
	if b.elf.Section(".debug_info") == nil && b.elf.Section(".zdebug_info") == nil {
		return nil, errNoDWARF
	}
	data, err := b.dwarfTypeData()
	if err != nil {
		return nil, corruptf("load DWARF: %v", err)
	}
	// The Go linker writes every type into the units named "runtime"
	// (Caddy: 5 of its 960 units, 5 MB of its 20 MB, every struct type);
	// the other units are skipped by their headers, without decoding an
	// entry. Only DWARF with no struct there has every unit indexed.
	idx = &dwarfIndex{data: data, structs: map[string]dwarf.Offset{}}
	if err := idx.index(func(unit string) bool { return unit == "runtime" }); err != nil {
		return nil, err
	}
	if len(idx.structs) == 0 {
		if err := idx.index(func(string) bool { return true }); err != nil {
			return nil, err
		}
	}
	return idx, nil
}

// index adds the struct types at the top level of the units that want
// names (Go puts its types at the top level of a unit); the first entry of
// a name wins. idx is not shared yet.
func (idx *dwarfIndex) index(want func(unit string) bool) error {
	r := idx.data.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return corruptf("read DWARF: %v", err)
		}
		if e == nil {
			return nil
		}
		if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagPartialUnit {
			if name, _ := e.Val(dwarf.AttrName).(string); !want(name) {
				r.SkipChildren() // to the next unit's header
			}
			continue
		}
		if e.Tag == dwarf.TagStructType {
			if name, ok := e.Val(dwarf.AttrName).(string); ok {
				if _, dup := idx.structs[name]; !dup {
					idx.structs[name] = e.Offset
				}
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
}

// PrefetchDWARF loads and indexes the DWARF in the background, while the
// caller reads the symbol and function tables: an analysis needs both, and
// the DWARF's decompression is the larger part of its time (Caddy's 20 MB
// .debug_info). wait returns once the load is over; call it before
// Release, so that what the prefetch loads is released too.
func (b *Binary) PrefetchDWARF() (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = b.dwarfTypes() // errors are FieldOffset's to report
	}()
	return func() { <-done }
}

// DWARFFieldOffset returns the byte offset of fieldPath within the struct
// typeName, read from the binary's DWARF only. fieldPath may name a nested
// field with dots, e.g. ("context.timerCtx", "cancelCtx.Context").
func (b *Binary) DWARFFieldOffset(typeName, fieldPath string) (off int64, err error) {
	defer recoverCorrupt(&err, "read DWARF type "+typeName)
	idx, err := b.dwarfTypes()
	if err != nil {
		return 0, fmt.Errorf("resolve %s.%s from DWARF: %w", typeName, fieldPath, err)
	}
	at, ok := idx.structs[typeName]
	if !ok {
		return 0, fmt.Errorf("resolve %s.%s from DWARF: type %w (%w)", typeName, fieldPath, ErrNotFound, errTypeNotInDWARF)
	}
	idx.mu.Lock()
	t, err := idx.data.Type(at)
	idx.mu.Unlock()
	if err != nil {
		return 0, corruptf("read DWARF type %s: %v", typeName, err)
	}
	for _, name := range strings.Split(fieldPath, ".") {
		st, ok := underlying(t).(*dwarf.StructType)
		if !ok {
			return 0, fmt.Errorf("resolve %s.%s from DWARF: %s is not a struct: %w", typeName, fieldPath, t, ErrNotFound)
		}
		var field *dwarf.StructField
		for _, f := range st.Field {
			if f.Name == name {
				field = f
				break
			}
		}
		if field == nil {
			return 0, fmt.Errorf("resolve %s.%s from DWARF: field %s %w", typeName, fieldPath, name, ErrNotFound)
		}
		off += field.ByteOffset
		t = field.Type
	}
	return off, nil
}

// underlying strips typedefs (a bounded number, in case corrupt DWARF
// makes a cycle).
func underlying(t dwarf.Type) dwarf.Type {
	for range 64 {
		td, ok := t.(*dwarf.TypedefType)
		if !ok {
			return t
		}
		t = td.Type
	}
	return t
}

// dwarfTypeData loads the DWARF sections that type lookups read: the
// entries, their abbreviations and the string tables; not the line, frame,
// location and range tables that debug/elf's DWARF also decompresses, most
// of the debug data of a large binary (jaeger: 22 MB of 28 compressed).
// Old-style .zdebug sections go through debug/elf.
func (b *Binary) dwarfTypeData() (*dwarf.Data, error) {
	sect := func(name string) ([]byte, error) {
		s := b.elf.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS {
			return nil, nil
		}
		return sectionBytes(s)
	}
	if b.elf.Section(".debug_info") == nil {
		return b.elf.DWARF()
	}
	var abbrev, info, str []byte
	var err error
	for _, x := range []struct {
		name string
		dst  *[]byte
	}{{".debug_abbrev", &abbrev}, {".debug_info", &info}, {".debug_str", &str}} {
		if *x.dst, err = sect(x.name); err != nil {
			return nil, fmt.Errorf("read %s: %w", x.name, err)
		}
	}
	d, err := dwarf.New(abbrev, nil, nil, info, nil, nil, nil, str)
	if err != nil {
		return nil, err
	}
	// DWARF 5 string and address indexes (C units of cgo binaries).
	for _, name := range []string{".debug_str_offsets", ".debug_line_str", ".debug_addr"} {
		data, err := sect(name)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if data != nil {
			if err := d.AddSection(name, data); err != nil {
				return nil, fmt.Errorf("add %s: %w", name, err)
			}
		}
	}
	return d, nil
}

// maxSectionRead bounds the buffer sectionBytes makes from a section
// header's size: a corrupt header must not allocate gigabytes.
const maxSectionRead = 1 << 30

// sectionBytes reads section s, decompressed, into a buffer of its size.
// debug/elf's Data grows its buffer as it reads a compressed section
// (it does not trust the size in the header), copying 20 MB of Caddy's
// .debug_info several times over; the size is trusted here up to
// maxSectionRead, and a section that does not fill it exactly is corrupt.
func sectionBytes(s *elf.Section) ([]byte, error) {
	if s.Flags&elf.SHF_COMPRESSED == 0 || s.Size > maxSectionRead {
		return s.Data()
	}
	buf := make([]byte, s.Size)
	r := s.Open()
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	if n, _ := r.Read(make([]byte, 1)); n != 0 {
		return nil, fmt.Errorf("section %s holds more than its %d bytes", s.Name, s.Size)
	}
	return buf, nil
}
