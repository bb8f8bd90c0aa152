package gobin

import (
	"errors"
	"fmt"
	"sort"
)

// Itab is an interface table that the linker laid out in the executable.
// The first word of a non-empty interface value points at the itab of its
// (interface, concrete type) pair; the runtime registers these static itabs
// at start-up and finds them before building any at run time, so a value
// of a pair listed here always carries this address. Addresses are
// link-time: for a PIE add the load bias.
type Itab struct {
	Addr          uint64   // address of the itab: an interface value's first word
	TypeAddr      uint64   // address of the concrete type's descriptor: the first word of an `any` holding it
	InterfaceAddr uint64   // address of the interface type's descriptor
	Type          TypeName // the concrete type, e.g. {"*context.valueCtx", "context"}
	Interface     TypeName // the interface, e.g. {"context.Context", "context"}
}

// maxItabs bounds the itab count, against corrupt moduledata. Large
// programs have a few thousand.
const maxItabs = 1 << 20

// Itabs returns the executable's static itabs, by address. They come from
// runtime.moduledata (the itablinks slice before Go 1.27, the itab block
// of the types section since), which stripped binaries keep because the
// runtime needs it; names come from the type descriptors. Supported for Go
// 1.18–1.27; other releases give an error wrapping ErrNoOffsets.
func (b *Binary) Itabs() ([]Itab, error) {
	ts, err := b.typeSection()
	if err != nil {
		return nil, fmt.Errorf("list itabs: %w", err)
	}
	return ts.itabs()
}

// TypeAddrOf returns the link-time address of the descriptor of the type
// the runtime prints as name, defined in package pkgPath (see TypeName):
// the value of an `any`'s type word that holds that type. It looks in
// .symtab when the linker put type symbols there, then in the itabs, then
// scans the type descriptors, so stripped binaries are covered; types that
// are never converted to an interface have no descriptor and give
// ErrNotFound. Each call reads the type data anew: callers with many
// lookups should use Itabs.
func (b *Binary) TypeAddrOf(name, pkgPath string) (uint64, error) {
	ts, err := b.typeSection()
	if err != nil {
		return 0, fmt.Errorf("find type %s: %w", fullTypeName(name, pkgPath), err)
	}
	return ts.typeAddr(TypeName{Name: name, PkgPath: pkgPath}, nil)
}

// typeAddr looks want up as TypeAddrOf does; itabs, if non-nil, are the
// already decoded itabs.
func (ts *typeSection) typeAddr(want TypeName, itabs []Itab) (uint64, error) {
	// "type:" since Go 1.20, "type." before.
	for _, prefix := range []string{"type:", "type."} {
		if s, ok, err := ts.b.symbol(prefix + want.String()); err == nil && ok {
			if n, err := ts.typeName(s.Value); err == nil && n == want {
				return s.Value, nil
			}
		}
	}
	if itabs == nil {
		itabs, _ = ts.itabs() // a broken itab block leaves the scan
	}
	for _, it := range itabs {
		if it.Type == want {
			return it.TypeAddr, nil
		}
		if it.Interface == want {
			return it.InterfaceAddr, nil
		}
	}
	return ts.findType(want)
}

// itabs decodes every static itab.
func (ts *typeSection) itabs() ([]Itab, error) {
	addrs, err := ts.itabAddrs()
	if err != nil {
		return nil, err
	}
	p := uint64(ts.b.ptr)
	itabs := make([]Itab, 0, len(addrs))
	for _, at := range addrs {
		inter, err1 := ts.ptrAt(at)
		typ, err2 := ts.ptrAt(at + p)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("read itab at %#x: %w", at, err)
		}
		in, err := ts.typeName(inter)
		if err != nil {
			return nil, fmt.Errorf("interface of itab at %#x: %w", at, err)
		}
		tn, err := ts.typeName(typ)
		if err != nil {
			return nil, fmt.Errorf("type of itab at %#x: %w", at, err)
		}
		itabs = append(itabs, Itab{Addr: at, TypeAddr: typ, InterfaceAddr: inter, Type: tn, Interface: in})
	}
	sort.Slice(itabs, func(i, j int) bool { return itabs[i].Addr < itabs[j].Addr })
	return itabs, nil
}

// itabAddrs lists the addresses of the static itabs.
func (ts *typeSection) itabAddrs() ([]uint64, error) {
	b, md, l := ts.b, ts.md, ts.layout
	if l.itablinks != 0 {
		ptr, err1 := b.mdWord(md, l.itablinks)
		n, err2 := b.mdWord(md, l.itablinks+1)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("read moduledata.itablinks: %w", err)
		}
		if n > maxItabs {
			return nil, corruptf("moduledata.itablinks has %d entries", n)
		}
		if n == 0 {
			return nil, nil
		}
		addrs, err := b.readWords(ptr, int(n), md.relocs)
		if err != nil {
			return nil, fmt.Errorf("read itablinks: %w", err)
		}
		return addrs, nil
	}
	off, err1 := b.mdWord(md, l.itabOffset)
	size, err2 := b.mdWord(md, l.itabSize)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("read moduledata.itaboffset: %w", err)
	}
	start := ts.start + off
	if off > uint64(len(ts.data)) || !ts.in(start, size) {
		return nil, corruptf("itab block %#x+%#x is outside the types section", off, size)
	}
	// Walk the block as runtime.addModuleItabs does: each itab is
	// abi.ITab (Inter, Type, Hash, Fun[1]) with Fun extended to one word
	// per interface method, unless Fun[0] is 0.
	p := uint64(ts.b.ptr)
	funOff := (2*p + 4 + p - 1) / p * p
	var addrs []uint64
	for at := start; at < start+size; {
		if len(addrs) >= maxItabs {
			return nil, corruptf("more than %d itabs", maxItabs)
		}
		addrs = append(addrs, at)
		fun0, err := ts.ptrAt(at + funOff)
		if err != nil {
			return nil, fmt.Errorf("read itab at %#x: %w", at, err)
		}
		n := uint64(1)
		if fun0 != 0 {
			inter, err1 := ts.ptrAt(at)
			// InterfaceType: Type, PkgPath, then the Methods slice.
			m, err2 := ts.ptrAt(inter + ts.rtypeSize() + 2*p)
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("read interface of itab at %#x: %w", at, err)
			}
			if m == 0 || m > 1<<16 {
				return nil, corruptf("itab at %#x: interface with %d methods", at, m)
			}
			n = m
		}
		at += funOff + n*p
	}
	return addrs, nil
}
