package gobin

import (
	"bytes"
	"debug/elf"
)

// symtab is .symtab and its string table as read from the file, searched
// by name without building a map of every symbol (debug/elf's Symbols
// allocates each one's name: 85 MB for jaeger's 135,000). Loaded on the
// first lookup; Release drops it.
type symtab struct {
	syms, strs []byte
	found      map[string]symResult // names asked, and their answers
}

type symResult struct {
	sym elf.Symbol
	ok  bool
}

// elf64SymSize is the size of an Elf64_Sym.
const elf64SymSize = 24

// symbol returns the function or data symbol of .symtab named name (the
// last one, if several), false when there is none or the binary is
// stripped.
func (b *Binary) symbol(name string) (elf.Symbol, bool, error) {
	b.loadMu.Lock()
	defer b.loadMu.Unlock()
	if !b.symsDone {
		b.symtab, b.symsErr = b.loadSymtab()
		b.symsDone = true
	}
	if b.symsErr != nil {
		return elf.Symbol{}, false, b.symsErr
	}
	t := b.symtab
	if t == nil {
		return elf.Symbol{}, false, nil
	}
	if r, ok := t.found[name]; ok {
		return r.sym, r.ok, nil
	}
	var r symResult
	for off := elf64SymSize; off+elf64SymSize <= len(t.syms); off += elf64SymSize {
		e := t.syms[off : off+elf64SymSize]
		info, shndx := e[4], elf.SectionIndex(b.order.Uint16(e[6:]))
		if typ := elf.ST_TYPE(info); typ != elf.STT_FUNC && typ != elf.STT_OBJECT || shndx == elf.SHN_UNDEF {
			continue
		}
		at := uint64(b.order.Uint32(e))
		if at >= uint64(len(t.strs)) || uint64(len(t.strs))-at < uint64(len(name))+1 ||
			t.strs[at+uint64(len(name))] != 0 || string(t.strs[at:at+uint64(len(name))]) != name {
			continue
		}
		r = symResult{ok: true, sym: elf.Symbol{
			Name: name, Info: info, Other: e[5], Section: shndx,
			Value: b.order.Uint64(e[8:]), Size: b.order.Uint64(e[16:]),
		}}
	}
	if len(t.found) < 1024 {
		t.found[name] = r
	}
	return r.sym, r.ok, nil
}

// loadSymtab reads .symtab and its string table: nil when stripped.
func (b *Binary) loadSymtab() (*symtab, error) {
	s := b.elf.SectionByType(elf.SHT_SYMTAB)
	if s == nil {
		return nil, nil
	}
	if s.Link == 0 || int(s.Link) >= len(b.elf.Sections) {
		return nil, corruptf("read .symtab: string table section %d", s.Link)
	}
	if s.Size > 1<<30 || b.elf.Sections[s.Link].Size > 1<<30 {
		return nil, corruptf("read .symtab: %d bytes of symbols, %d of names", s.Size, b.elf.Sections[s.Link].Size)
	}
	syms, err := s.Data()
	if err != nil {
		return nil, corruptf("read .symtab: %v", err)
	}
	if len(syms)%elf64SymSize != 0 {
		return nil, corruptf("read .symtab: %d bytes is not a whole number of symbols", len(syms))
	}
	strs, err := b.elf.Sections[s.Link].Data()
	if err != nil {
		return nil, corruptf("read .symtab's names: %v", err)
	}
	if len(strs) > 0 && bytes.IndexByte(strs[len(strs)-1:], 0) < 0 {
		strs = append(strs, 0)
	}
	return &symtab{syms: syms, strs: strs, found: map[string]symResult{}}, nil
}
