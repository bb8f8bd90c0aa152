package gobin

import (
	"debug/elf"
	"fmt"
	"sort"
	"strings"
)

// Func is a function of the executable.
type Func struct {
	Name  string // symbol name, e.g. "context.(*timerCtx).cancel"
	Entry uint64 // virtual address of the first instruction
	End   uint64 // virtual address just past the function (may include alignment padding)
	// FileOffset is the file offset of Entry: the value to attach a uprobe
	// at the function's entry (cilium/ebpf link.UprobeOptions.Address).
	FileOffset uint64
}

// Func looks a function up by its full symbol name: in the pclntab's
// function records (which stripped binaries keep), else in .symtab, else
// through debug/gosym. They give the same Entry.
func (b *Binary) Func(name string) (Func, error) {
	p, perr := b.lineTable()
	if perr == nil && p.funcs != nil {
		entry, end, ok := p.funcs.lookup(name)
		if !ok {
			return Func{}, fmt.Errorf("look up %s: %w", name, ErrNotFound)
		}
		return b.makeFunc(name, entry, end)
	}
	s, ok, err := b.symbol(name)
	if err != nil {
		return Func{}, fmt.Errorf("look up %s: %w", name, err)
	}
	if ok && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 {
		return b.makeFunc(name, s.Value, s.Value+s.Size)
	}
	if perr != nil {
		return Func{}, fmt.Errorf("look up %s: %w", name, perr)
	}
	f := p.table.LookupFunc(name)
	if f == nil {
		return Func{}, fmt.Errorf("look up %s: %w", name, ErrNotFound)
	}
	return b.makeFunc(name, f.Entry, f.End)
}

// Funcs returns the functions whose name starts with prefix, by entry
// address, from the pclntab (so stripped binaries give the same answer).
func (b *Binary) Funcs(prefix string) ([]Func, error) {
	p, err := b.lineTable()
	if err != nil {
		return nil, fmt.Errorf("list functions %s*: %w", prefix, err)
	}
	var out []Func
	add := func(name string, entry, end uint64) error {
		fn, err := b.makeFunc(name, entry, end)
		if err != nil {
			return fmt.Errorf("list functions %s*: %w", prefix, err)
		}
		out = append(out, fn)
		return nil
	}
	if p.funcs != nil {
		if err := p.funcs.each(prefix, add); err != nil {
			return nil, err
		}
	} else {
		for i := range p.table.Funcs {
			if f := &p.table.Funcs[i]; strings.HasPrefix(f.Name, prefix) {
				if err := add(f.Name, f.Entry, f.End); err != nil {
					return nil, err
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Entry < out[j].Entry })
	return out, nil
}

func (b *Binary) makeFunc(name string, entry, end uint64) (Func, error) {
	if end <= entry {
		return Func{}, corruptf("function %s has range %#x–%#x", name, entry, end)
	}
	off, err := b.FileOffset(entry)
	if err != nil {
		return Func{}, fmt.Errorf("locate %s in the file: %w", name, err)
	}
	return Func{Name: name, Entry: entry, End: end, FileOffset: off}, nil
}
