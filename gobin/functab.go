package gobin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// funcTab reads what debug/gosym does not expose of a Go 1.18+ pclntab: the
// runtime._func records with their PCDATA tables and FUNCDATA offsets, which
// carry the inline trees. It mirrors runtime/symtab.go (findfunc, pcvalue,
// pcdatavalue, funcdata, funcline1) and, unlike the runtime, bounds-checks
// every read, so a corrupt table yields an error or -1, never a panic.
type funcTab struct {
	b      *Binary
	layout inlineLayout
	data   *pclnData // the whole pclntab

	// Offsets into data of the tables the header points at. Their lengths
	// are not recorded; reads are bounded by the end of data, as in gosym.
	funcnametab, cutab, filetab, pctab, functab uint64
	nfunc                                       uint64

	textStart uint64 // address entry offsets are relative to (moduledata.text)
	gofunc    uint64 // address FUNCDATA offsets are relative to (moduledata.gofunc)
	quantum   uint64 // PC-value tables count PC deltas in these units

	indexMu sync.Mutex
	index   map[uint64]uint32 // hash of a function's name → its entry (lookup)
}

// funcRecord is the part of one runtime._func that symbolization needs.
type funcRecord struct {
	at        uint64 // offset of the record in the pclntab
	entry     uint64 // address of the function's first instruction
	nameOff   int32  // into funcnametab
	pcsp      uint32 // PC-value table of the stack pointer's delta from the entry
	pcfile    uint32 // PC-value table of file numbers
	pcln      uint32 // PC-value table of lines
	npcdata   uint32
	cuOffset  uint32 // the function's compilation unit in cutab
	nfuncdata uint8
}

// newFuncTab checks the header offsets of a Go 1.18+ pclntab and that its
// function table fits in it.
func (b *Binary) newFuncTab(table *pclnData, hdr []byte, layout inlineLayout, textStart, gofunc uint64) (*funcTab, error) {
	data := hdr
	word := func(i int) uint64 { return b.uintptr(data[8+i*b.ptr:]) }
	t := &funcTab{
		b: b, layout: layout, data: table,
		nfunc:       word(0),
		funcnametab: word(3), cutab: word(4), filetab: word(5), pctab: word(6), functab: word(7),
		textStart: textStart, gofunc: gofunc, quantum: uint64(data[6]),
	}
	if t.quantum == 0 {
		return nil, corruptf("pclntab instruction size quantum is 0")
	}
	size := table.size
	if t.functab > size || t.nfunc >= (size-t.functab)/8 {
		return nil, corruptf("pclntab function table of %d entries at %#x overruns %d bytes", t.nfunc, t.functab, size)
	}
	return t, nil
}

// u32 reads a uint32 at off in the pclntab.
func (t *funcTab) u32(off uint64) (uint32, bool) {
	var w [4]byte
	if !t.data.readInto(off, w[:]) {
		return 0, false
	}
	// Concrete calls: w stays on the stack.
	if t.b.order == binary.BigEndian {
		return binary.BigEndian.Uint32(w[:]), true
	}
	return binary.LittleEndian.Uint32(w[:]), true
}

// cstring reads the NUL-terminated string at off in the pclntab.
func (t *funcTab) cstring(off uint64) (string, bool) {
	return t.data.cstring(off)
}

// entryOff returns the text offset of function table entry i; entry nfunc
// is the end of the last function.
func (t *funcTab) entryOff(i uint64) uint32 {
	v, _ := t.u32(t.functab + 8*i) // in range: checked by newFuncTab
	return v
}

// find returns the record of the function holding pc, like
// runtime.findfunc but by binary search instead of findfunctab buckets.
func (t *funcTab) find(pc uint64) (funcRecord, error) {
	if pc < t.textStart || pc-t.textStart >= 1<<32 {
		return funcRecord{}, fmt.Errorf("find function of %#x: %w", pc, ErrNotFound)
	}
	off := uint32(pc - t.textStart)
	if t.nfunc == 0 || off < t.entryOff(0) || off >= t.entryOff(t.nfunc) {
		return funcRecord{}, fmt.Errorf("find function of %#x: %w", pc, ErrNotFound)
	}
	n := sort.Search(int(t.nfunc), func(i int) bool { return t.entryOff(uint64(i)) > off })
	if n == 0 {
		return funcRecord{}, corruptf("function table is not sorted at %#x", pc)
	}
	i := uint64(n - 1)
	funcoff, _ := t.u32(t.functab + 8*i + 4)
	at := t.functab + uint64(funcoff)
	size := uint64(t.layout.funcSize)
	d, ok := t.data.at(at, size)
	if !ok {
		return funcRecord{}, corruptf("function record %d at %#x overruns the pclntab", i, at)
	}
	f := funcRecord{
		at:        at,
		entry:     t.textStart + uint64(t.b.order.Uint32(d)),
		nameOff:   int32(t.b.order.Uint32(d[4:])),
		pcsp:      t.b.order.Uint32(d[16:]),
		pcfile:    t.b.order.Uint32(d[20:]),
		pcln:      t.b.order.Uint32(d[24:]),
		npcdata:   t.b.order.Uint32(d[28:]),
		cuOffset:  t.b.order.Uint32(d[32:]),
		nfuncdata: d[size-1],
	}
	if f.entry != t.textStart+uint64(t.entryOff(i)) {
		return funcRecord{}, corruptf("function record %d has entry %#x, the function table says %#x", i, f.entry, t.textStart+uint64(t.entryOff(i)))
	}
	return f, nil
}

// pcvalues decodes the PC-value table at off in pctab, as runtime.pcvalue
// does: pairs of zigzag value delta and PC delta (in quanta), starting at
// the entry with value -1. It yields each run's value and the PC just past
// it, in order, until yield returns false or the table ends (its
// terminator, or malformed).
func (t *funcTab) pcvalues(f funcRecord, off uint32, yield func(val int32, end uint64) bool) {
	if off == 0 {
		return
	}
	p := t.pctab + uint64(off)
	pc, val := f.entry, int32(-1)
	for {
		first := pc == f.entry
		uv, ok := t.varint(&p)
		if !ok || uv == 0 && !first {
			return
		}
		val += int32(-(uv & 1) ^ (uv >> 1))
		pcDelta, ok := t.varint(&p)
		if !ok {
			return
		}
		pc += uint64(pcDelta) * t.quantum
		if !yield(val, pc) {
			return
		}
	}
}

// pcvalue is the value of the PC-value table at off for target: -1 when
// there is no table, the target is not covered or the table is malformed.
func (t *funcTab) pcvalue(f funcRecord, off uint32, target uint64) int32 {
	v := int32(-1)
	t.pcvalues(f, off, func(val int32, end uint64) bool {
		if target < end {
			v = val
			return false
		}
		return true
	})
	return v
}

// varint reads an unsigned LEB128 value of at most 32 bits at *p.
func (t *funcTab) varint(p *uint64) (uint32, bool) {
	if *p >= t.data.size {
		return 0, false
	}
	b, ok := t.data.at(*p, min(5, t.data.size-*p))
	if !ok {
		return 0, false
	}
	var v uint32
	for i, shift := 0, uint(0); i < len(b); i, shift = i+1, shift+7 {
		c := b[i]
		*p++
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, true
		}
	}
	return 0, false
}

// pcdata returns the value of PCDATA table i at pc, or -1.
func (t *funcTab) pcdata(f funcRecord, i uint32, pc uint64) int32 {
	if i >= f.npcdata {
		return -1
	}
	off, ok := t.u32(f.at + uint64(t.layout.funcSize) + 4*uint64(i))
	if !ok {
		return -1
	}
	return t.pcvalue(f, off, pc)
}

// funcdata returns the address of FUNCDATA i of f, which the linker stores
// as an offset from moduledata.gofunc.
func (t *funcTab) funcdata(f funcRecord, i uint8) (uint64, bool) {
	if i >= f.nfuncdata {
		return 0, false
	}
	off, ok := t.u32(f.at + uint64(t.layout.funcSize) + 4*uint64(f.npcdata) + 4*uint64(i))
	if !ok || off == ^uint32(0) {
		return 0, false
	}
	return t.gofunc + uint64(off), true
}

// funcName returns the name at nameOff in funcnametab, in the form
// runtime.Frame.Function gives it.
func (t *funcTab) funcName(nameOff int32) string {
	if nameOff == 0 {
		return ""
	}
	if nameOff < 0 {
		return "?"
	}
	name, ok := t.cstring(t.funcnametab + uint64(nameOff))
	if !ok {
		return "?"
	}
	if t.layout.printNames {
		name = nameForPrint(name)
	}
	return name
}

// line returns the file and line of pc in f, "?" and 0 when unknown, as
// runtime.funcline1 does.
func (t *funcTab) line(f funcRecord, pc uint64) (string, int) {
	fileno := t.pcvalue(f, f.pcfile, pc)
	line := t.pcvalue(f, f.pcln, pc)
	if fileno < 0 || line == -1 {
		return "?", 0
	}
	fileoff, ok := t.u32(t.cutab + 4*(uint64(f.cuOffset)+uint64(fileno)))
	if !ok || fileoff == ^uint32(0) {
		return "?", 0
	}
	file, ok := t.cstring(t.filetab + uint64(fileoff))
	if !ok {
		return "?", 0
	}
	return file, int(line)
}

// nameForPrint shortens the shape arguments of a generic function's name to
// "[...]", as runtime.funcNameForPrint does since Go 1.21.
func nameForPrint(name string) string {
	i := strings.IndexByte(name, '[')
	j := strings.LastIndexByte(name, ']')
	if i < 0 || j <= i {
		return name
	}
	return name[:i] + "[...]" + name[j+1:]
}

// loadFuncTab prepares the function-record reader of a Go 1.18+ pclntab
// when the Go version's layouts are known and moduledata.gofunc is found.
func (b *Binary) loadFuncTab(data *pclnData, hdr []byte, magic uint32, textStart uint64, md moduledata) (*funcTab, error) {
	layout, ok := inlineLayoutFor(b.GoVersion)
	if !ok {
		return nil, fmt.Errorf("inline tree layout of %s: %w", b.GoVersion, ErrNotFound)
	}
	if layout.magic != magic {
		return nil, corruptf("%s with pclntab magic %#x", b.GoVersion, magic)
	}
	gofunc, err := b.gofunc(md, layout)
	if err != nil {
		return nil, err
	}
	return b.newFuncTab(data, hdr, layout, textStart, gofunc)
}

// gofunc finds moduledata.gofunc, the go:func.* symbol that FUNCDATA
// offsets are relative to: in moduledata, which stripped binaries keep, else
// by the symbol (go.func.* before Go 1.20).
func (b *Binary) gofunc(md moduledata, layout inlineLayout) (uint64, error) {
	rodata, err1 := b.mdWord(md, layout.gofuncWord-1)
	gofunc, err2 := b.mdWord(md, layout.gofuncWord)
	if err1 == nil && err2 == nil && rodata <= gofunc {
		if _, err := b.read(gofunc, 1); err == nil {
			return gofunc, nil
		}
	}
	for _, name := range []string{"go:func.*", "go.func.*"} {
		s, ok, err := b.symbol(name)
		if err != nil {
			return 0, fmt.Errorf("find go:func.*: %w", err)
		}
		if ok {
			return s.Value, nil
		}
	}
	return 0, corruptf("no moduledata.gofunc (%v) and no go:func.* symbol", errors.Join(err1, err2))
}

// entry returns the raw name offset and the address range of function
// table entry i (the end is the next function's entry, as debug/gosym has
// it).
func (t *funcTab) entry(i uint64) (nameOff int32, entry, end uint64, ok bool) {
	funcoff, ok := t.u32(t.functab + 8*i + 4)
	if !ok {
		return 0, 0, 0, false
	}
	off, ok := t.u32(t.functab + uint64(funcoff) + 4)
	if !ok {
		return 0, 0, 0, false
	}
	return int32(off), t.textStart + uint64(t.entryOff(i)), t.textStart + uint64(t.entryOff(i+1)), true
}

// lookup finds the function whose symbol name is name. The first lookup
// indexes the table by a hash of each name (a map entry a function, no
// names kept); the index lives until Binary.Release.
func (t *funcTab) lookup(name string) (entry, end uint64, ok bool) {
	t.indexMu.Lock()
	defer t.indexMu.Unlock()
	if t.index == nil {
		t.index = make(map[uint64]uint32, t.nfunc)
		for i := uint64(0); i < t.nfunc; i++ {
			nameOff, _, _, ok := t.entry(i)
			if !ok || nameOff <= 0 {
				continue
			}
			h, ok := t.data.hashCString(t.funcnametab + uint64(nameOff))
			if !ok {
				continue
			}
			if _, dup := t.index[h]; dup {
				t.index[h] = indexCollision
			} else {
				t.index[h] = uint32(i)
			}
		}
	}
	match := func(i uint64) (uint64, uint64, bool) {
		nameOff, entry, end, ok := t.entry(i)
		if ok && nameOff > 0 && t.data.equalCString(t.funcnametab+uint64(nameOff), name) {
			return entry, end, true
		}
		return 0, 0, false
	}
	if t.index != nil {
		i, found := t.index[hashString(name)]
		if !found {
			return 0, 0, false
		}
		if i != indexCollision {
			return match(uint64(i))
		}
	}
	for i := uint64(0); i < t.nfunc; i++ { // a hash shared by two names, or no index
		if entry, end, ok := match(i); ok {
			return entry, end, true
		}
	}
	return 0, 0, false
}

// indexCollision marks a hash that more than one name has.
const indexCollision = ^uint32(0)

// each calls fn with every function whose symbol name starts with prefix.
func (t *funcTab) each(prefix string, fn func(name string, entry, end uint64) error) error {
	for i := uint64(0); i < t.nfunc; i++ {
		nameOff, entry, end, ok := t.entry(i)
		if !ok || nameOff <= 0 || !t.data.hasPrefix(t.funcnametab+uint64(nameOff), prefix) {
			continue
		}
		name, ok := t.cstring(t.funcnametab + uint64(nameOff))
		if !ok {
			continue
		}
		if err := fn(name, entry, end); err != nil {
			return err
		}
	}
	return nil
}

// release drops what the analysis of the binary held in memory.
func (t *funcTab) release() {
	t.indexMu.Lock()
	t.index = nil
	t.indexMu.Unlock()
	t.data.release()
}
