package gobin

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
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

// dwarfTypes loads the DWARF data and indexes its struct types once.
func (b *Binary) dwarfTypes() (*dwarfIndex, error) {
	b.loadMu.Lock()
	defer b.loadMu.Unlock()
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
	idx = &dwarfIndex{data: data, structs: map[string]dwarf.Offset{}}
	r := data.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return nil, corruptf("read DWARF: %v", err)
		}
		if e == nil {
			return idx, nil
		}
		if e.Tag == dwarf.TagCompileUnit {
			continue // Go puts its types at the top level of each unit
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
		return 0, fmt.Errorf("resolve %s.%s from DWARF: type %w", typeName, fieldPath, ErrNotFound)
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
		return s.Data()
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
