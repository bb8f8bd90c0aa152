package gobin

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// TypeName names a Go type the way the runtime does.
type TypeName struct {
	// Name is the type as the runtime prints it (reflect.Type.String):
	// qualified by package name, e.g. "*context.valueCtx" or
	// "trace.nonRecordingSpan".
	Name string
	// PkgPath is the import path of the package that defines the named
	// type (for *T, that of T), e.g. "context" or
	// "go.opentelemetry.io/otel/sdk/trace". It tells apart types whose
	// package names collide. Empty for predeclared and most unnamed types,
	// and for named map types, whose descriptor layout varies across Go
	// releases and experiments.
	PkgPath string
}

// String returns the name with the package qualifier spelled as the full
// import path, as in linker symbols ("*go.opentelemetry.io/otel/sdk/trace.recordingSpan").
func (n TypeName) String() string { return fullTypeName(n.Name, n.PkgPath) }

// fullTypeName replaces the package name qualifying a runtime type name by
// the package path. Names it cannot split are returned unchanged.
func fullTypeName(name, pkgPath string) string {
	stars := len(name) - len(strings.TrimLeft(name, "*"))
	_, local, ok := strings.Cut(name[stars:], ".")
	if pkgPath == "" || !ok {
		return name
	}
	return name[:stars] + pkgPath + "." + local
}

// Bits of abi.TFlag, unchanged since Go 1.14.
const (
	tflagUncommon  = 1 << 0 // an abi.UncommonType follows the kind-specific part
	tflagExtraStar = 1 << 1 // the name has a '*' prefix to drop
	tflagNamed     = 1 << 2
)

// abi.Kind values (the low five bits of Type.Kind_), unchanged since Go 1.0.
const (
	kindArray     = 17
	kindChan      = 18
	kindFunc      = 19
	kindInterface = 20
	kindMap       = 21
	kindPointer   = 22
	kindSlice     = 23
	kindStruct    = 25
	kindLast      = 26 // UnsafePointer
	kindMask      = 0x1f
)

// typeLayout holds the word indexes of the runtime.moduledata fields that
// locate type descriptors and itabs in one range of Go releases.
type typeLayout struct {
	types, etypes int // the types section: nameOff base and its end
	// itablinks is the []*itab slice of Go ≤ 1.26; 0 from Go 1.27, which
	// lays the itabs out back to back at types+itaboffset instead.
	itablinks            int
	itabOffset, itabSize int
}

// typeLayoutFor returns the moduledata layout of a Go version (see
// runtime/symtab.go of each release), false outside Go 1.18–1.27.
func typeLayoutFor(goVersion string) (typeLayout, bool) {
	major, minor, ok := goRelease(goVersion)
	if !ok || major != 1 {
		return typeLayout{}, false
	}
	switch {
	case minor >= 18 && minor <= 19:
		// ... gcbss, types, etypes, rodata, gofunc, textsectmap, typelinks, itablinks
		return typeLayout{types: 35, etypes: 36, itablinks: 45}, true
	case minor >= 20 && minor <= 25:
		// Go 1.20 added covctrs, ecovctrs before end.
		return typeLayout{types: 37, etypes: 38, itablinks: 47}, true
	case minor == 26:
		// Go 1.26 added epclntab after gofunc.
		return typeLayout{types: 37, etypes: 38, itablinks: 48}, true
	case minor == 27:
		// Go 1.27: types, typedesclen, etypes, itaboffset, itabsize; no
		// typelinks or itablinks.
		return typeLayout{types: 37, etypes: 39, itabOffset: 40, itabSize: 41}, true
	}
	return typeLayout{}, false
}

// maxTypesSize bounds the types section read into memory, against a
// corrupt moduledata.
const maxTypesSize = 1 << 30

// typeSection is the runtime type data of the executable: the range
// [types, etypes) that abi.NameOff and abi.TypeOff are relative to, held in
// memory, plus what is needed to follow pointers out of it.
type typeSection struct {
	b      *Binary
	layout typeLayout
	md     moduledata
	start  uint64 // moduledata.types
	data   []byte // the bytes of [start, moduledata.etypes)
}

// typeSection returns the types section that moduledata points at, read
// once (several analyses walk it) until Release.
func (b *Binary) typeSection() (*typeSection, error) {
	b.typesMu.Lock()
	defer b.typesMu.Unlock()
	if !b.typesDone {
		b.types, b.typesErr = b.readTypeSection()
		b.typesDone = true
	}
	return b.types, b.typesErr
}

func (b *Binary) readTypeSection() (*typeSection, error) {
	layout, ok := typeLayoutFor(b.GoVersion)
	if !ok {
		return nil, fmt.Errorf("read type descriptors: %w: moduledata layout of %s is not known (Go 1.18–1.27)", ErrNoOffsets, b.GoVersion)
	}
	md, err := b.typesModuledata()
	if err != nil {
		return nil, fmt.Errorf("read type descriptors: %w", err)
	}
	start, err1 := b.mdWord(md, layout.types)
	end, err2 := b.mdWord(md, layout.etypes)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("read moduledata.types: %w", err)
	}
	if start >= end || end-start > maxTypesSize {
		return nil, corruptf("moduledata types section %#x–%#x", start, end)
	}
	data, err := b.read(start, end-start)
	if err != nil {
		return nil, fmt.Errorf("read types section: %w", err)
	}
	return &typeSection{b: b, layout: layout, md: md, start: start, data: data}, nil
}

// typesModuledata finds runtime.firstmoduledata the way the pclntab reader
// does, from the pclntab's address and header, without parsing the
// function table.
func (b *Binary) typesModuledata() (moduledata, error) {
	for _, name := range []string{".gopclntab", ".data.rel.ro.gopclntab"} {
		s := b.elf.Section(name)
		if s == nil || s.Type == 8 { // SHT_NOBITS
			continue
		}
		hdr := make([]byte, 8+8*b.ptr)
		if _, err := s.ReadAt(hdr, 0); err != nil {
			return moduledata{}, corruptf("read pclntab header: %v", err)
		}
		if m := b.order.Uint32(hdr); m != pclnMagic118 && m != pclnMagic120 {
			return moduledata{}, corruptf("pclntab magic %#x: not a Go 1.18+ pclntab", m)
		}
		md := b.moduledata(s.Addr, hdr)
		return md, md.err
	}
	return moduledata{}, corruptf("no .gopclntab section")
}

// in reports whether [addr, addr+n) lies in the types section.
func (ts *typeSection) in(addr, n uint64) bool {
	return addr >= ts.start && n <= uint64(len(ts.data)) && addr-ts.start <= uint64(len(ts.data))-n
}

// bytesAt returns n bytes at addr, which must lie in the types section.
func (ts *typeSection) bytesAt(addr, n uint64) ([]byte, error) {
	if !ts.in(addr, n) {
		return nil, corruptf("%d bytes at %#x are outside the types section %#x+%#x", n, addr, ts.start, len(ts.data))
	}
	off := addr - ts.start
	return ts.data[off : off+n], nil
}

// ptrAt reads a pointer-sized word at addr anywhere in the file image. A
// zero word takes the value of its relative relocation: position-
// independent executables may keep pointers only there.
func (ts *typeSection) ptrAt(addr uint64) (uint64, error) {
	var w uint64
	if p, err := ts.bytesAt(addr, uint64(ts.b.ptr)); err == nil {
		w = ts.b.uintptr(p)
	} else {
		words, err := ts.b.readWords(addr, 1, ts.md.relocs)
		if err != nil {
			return 0, err
		}
		return words[0], nil
	}
	if w == 0 {
		w = ts.md.relocs[addr]
	}
	return w, nil
}

// rtype is the part of an abi.Type (runtime._type before Go 1.21) the
// analysis reads. Its layout has been the same since Go 1.14.
type rtype struct {
	addr     uint64
	size     uint64
	ptrBytes uint64
	tflag    uint8
	align    uint8
	kind     uint8
	str      int32 // abi.NameOff of the string form
}

// rtypeSize is the size of abi.Type: Size_, PtrBytes, Hash+TFlag+Align_+
// FieldAlign_+Kind_ (8 bytes), Equal, GCData, Str+PtrToThis (8 bytes).
func (ts *typeSection) rtypeSize() uint64 { return uint64(4*ts.b.ptr + 16) }

// typeAt decodes the type descriptor at addr and checks that it is
// plausible: type descriptors live in the types section, aligned to a
// word, and their fields obey the invariants the compiler guarantees.
func (ts *typeSection) typeAt(addr uint64) (rtype, error) {
	p := uint64(ts.b.ptr)
	if addr%p != 0 {
		return rtype{}, corruptf("type descriptor address %#x is not aligned", addr)
	}
	d, err := ts.bytesAt(addr, ts.rtypeSize())
	if err != nil {
		return rtype{}, fmt.Errorf("read type descriptor: %w", err)
	}
	t := rtype{
		addr:     addr,
		size:     ts.b.uintptr(d),
		ptrBytes: ts.b.uintptr(d[p:]),
		tflag:    d[2*p+4],
		align:    d[2*p+5],
		kind:     d[2*p+7] & kindMask,
		str:      int32(ts.b.order.Uint32(d[4*p+8:])),
	}
	fieldAlign := d[2*p+6]
	switch {
	case t.kind == 0 || t.kind > kindLast:
		return rtype{}, corruptf("type at %#x has kind %d", addr, t.kind)
	case t.align == 0 || t.align&(t.align-1) != 0 || fieldAlign == 0 || fieldAlign&(fieldAlign-1) != 0:
		return rtype{}, corruptf("type at %#x has alignment %d/%d", addr, t.align, fieldAlign)
	case t.ptrBytes > t.size:
		return rtype{}, corruptf("type at %#x has %d pointer bytes in %d", addr, t.ptrBytes, t.size)
	case t.str <= 0 || uint64(t.str) >= uint64(len(ts.data)):
		return rtype{}, corruptf("type at %#x has name offset %#x", addr, t.str)
	}
	return t, nil
}

// maxNameLen bounds a decoded name; the compiler refuses 1<<29 bytes, real
// ones are far shorter, a corrupt varint could be anything.
const maxNameLen = 1 << 20

// nameAt decodes the abi.Name at addr: a flag byte, a varint length, the
// bytes.
func (ts *typeSection) nameAt(addr uint64) (string, error) {
	if !ts.in(addr, 2) {
		return "", corruptf("name at %#x is outside the types section", addr)
	}
	d := ts.data[addr-ts.start:]
	n, k := binary.Uvarint(d[1:min(len(d), 1+binary.MaxVarintLen32)])
	if k <= 0 || n > maxNameLen || n > uint64(len(d)-1-k) {
		return "", corruptf("name at %#x has a bad length", addr)
	}
	return string(d[1+k : 1+k+int(n)]), nil
}

// name decodes the abi.Name at a NameOff from the start of the types
// section.
func (ts *typeSection) name(off int32) (string, error) {
	if off <= 0 {
		return "", corruptf("name offset %d", off)
	}
	return ts.nameAt(ts.start + uint64(off))
}

// typeString returns t's name as the runtime prints it (runtime
// rtype.string): the stored name carries an extra leading '*' when
// TFlagExtraStar is set, so that T and *T share one string.
func (ts *typeSection) typeString(t rtype) (string, error) {
	s, err := ts.name(t.str)
	if err != nil {
		return "", fmt.Errorf("name of type at %#x: %w", t.addr, err)
	}
	if t.tflag&tflagExtraStar != 0 {
		if !strings.HasPrefix(s, "*") {
			return "", corruptf("type at %#x has TFlagExtraStar but name %q", t.addr, s)
		}
		s = s[1:]
	}
	return s, nil
}

// uncommonOffset returns the offset of the abi.UncommonType that follows a
// type descriptor of kind k (see abi.Type.Uncommon), false for map types.
func (ts *typeSection) uncommonOffset(k uint8) (uint64, bool) {
	p, base := uint64(ts.b.ptr), ts.rtypeSize()
	switch k {
	case kindStruct, kindInterface: // PkgPath Name, then a slice
		return base + 4*p, true
	case kindPointer, kindSlice: // Elem
		return base + p, true
	case kindFunc: // InCount, OutCount uint16, padded to a word
		return base + p, true
	case kindChan: // Elem, Dir
		return base + 2*p, true
	case kindArray: // Elem, Slice, Len
		return base + 3*p, true
	case kindMap:
		// The map descriptor changed with swiss maps (Go 1.24) and
		// differs under GOEXPERIMENTs; not worth guessing for a name.
		return 0, false
	}
	return base, true
}

// pkgPath returns the import path of the package defining t: the
// UncommonType's PkgPath, else for a pointer that of its element, else for
// an interface InterfaceType.PkgPath.
func (ts *typeSection) pkgPath(t rtype, depth int) (string, error) {
	if t.tflag&tflagUncommon != 0 {
		if off, ok := ts.uncommonOffset(t.kind); ok {
			d, err := ts.bytesAt(t.addr+off, 4)
			if err != nil {
				return "", fmt.Errorf("read uncommon type of %#x: %w", t.addr, err)
			}
			if po := int32(ts.b.order.Uint32(d)); po != 0 {
				return ts.name(po)
			}
			return "", nil
		}
	}
	switch {
	case t.kind == kindPointer && depth == 0:
		elem, err := ts.ptrAt(t.addr + ts.rtypeSize())
		if err != nil || elem == 0 {
			return "", err
		}
		et, err := ts.typeAt(elem)
		if err != nil {
			return "", fmt.Errorf("element of pointer type at %#x: %w", t.addr, err)
		}
		return ts.pkgPath(et, depth+1)
	case t.kind == kindInterface:
		at, err := ts.ptrAt(t.addr + ts.rtypeSize())
		if err != nil || at == 0 {
			return "", err
		}
		return ts.nameAt(at)
	}
	return "", nil
}

// typeName decodes the name and package path of the type at addr.
func (ts *typeSection) typeName(addr uint64) (TypeName, error) {
	t, err := ts.typeAt(addr)
	if err != nil {
		return TypeName{}, err
	}
	name, err := ts.typeString(t)
	if err != nil {
		return TypeName{}, err
	}
	pkg, err := ts.pkgPath(t, 0)
	if err != nil {
		return TypeName{}, fmt.Errorf("package of %s: %w", name, err)
	}
	return TypeName{Name: name, PkgPath: pkg}, nil
}

// findType scans the types section for the descriptor of the type named
// want, for types that no symbol and no itab lead to (stripped binaries
// keep no type symbols; a concrete type converted straight to `any` has
// no itab). It first finds the encoded name string, then the descriptors
// whose Str points at it, and keeps those whose decoded name and package
// match. Descriptors are word-aligned, so the scan steps by a word.
func (ts *typeSection) findType(want TypeName) (uint64, error) {
	stored := want.Name
	if !strings.HasPrefix(stored, "*") {
		stored = "*" + stored // TFlagExtraStar
	}
	var enc []byte
	enc = binary.AppendUvarint(enc, uint64(len(stored)))
	enc = append(enc, stored...)
	offs := map[int32]bool{}
	for from := 1; from < len(ts.data); {
		i := bytes.Index(ts.data[from:], enc)
		if i < 0 {
			break
		}
		at := from + i - 1 // the flag byte
		if ts.data[at]&^0x0f == 0 && at > 0 {
			offs[int32(at)] = true
		}
		from += i + 1
	}
	if len(offs) == 0 {
		return 0, fmt.Errorf("find type %s: name %w", want, ErrNotFound)
	}
	p := ts.b.ptr
	strAt := 4*p + 8
	var found []uint64
	for off := (p - int(ts.start%uint64(p))) % p; off+int(ts.rtypeSize()) <= len(ts.data); off += p {
		if !offs[int32(ts.b.order.Uint32(ts.data[off+strAt:]))] {
			continue
		}
		addr := ts.start + uint64(off)
		if n, err := ts.typeName(addr); err == nil && n == want {
			found = append(found, addr)
		}
	}
	switch len(found) {
	case 0:
		return 0, fmt.Errorf("find type %s: %w", want, ErrNotFound)
	case 1:
		return found[0], nil
	}
	return 0, corruptf("%d type descriptors named %s at %#x", len(found), want, found)
}
