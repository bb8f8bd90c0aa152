package gobin

import (
	"debug/dwarf"
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
	b.dwarfOnce.Do(func() { b.dwarf, b.dwarfErr = b.loadDWARF() })
	return b.dwarf, b.dwarfErr
}

func (b *Binary) loadDWARF() (idx *dwarfIndex, err error) {
	defer recoverCorrupt(&err, "parse DWARF")
	if b.elf.Section(".debug_info") == nil && b.elf.Section(".zdebug_info") == nil {
		return nil, errNoDWARF
	}
	data, err := b.elf.DWARF()
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
