package gobin

import (
	"debug/elf"
	"debug/gosym"
	"fmt"
)

// pclntab magic numbers (internal/abi.Go1xxPCLnTabMagic).
const (
	pclnMagic116 = 0xfffffffa // Go 1.16–1.17: function entries are absolute PCs
	pclnMagic118 = 0xfffffff0 // Go 1.18–1.19: entries are offsets from the text start
	pclnMagic120 = 0xfffffff1 // Go 1.20 and later
)

// Word indexes of runtime.moduledata fields, unchanged from Go 1.16 to 1.27:
// pcHeader, then five slices (three words each) and ftab, then findfunctab,
// minpc, maxpc, text, etext.
const (
	mdPCHeader    = 0
	mdFuncnametab = 1
	mdText        = 22
	mdEtext       = 23
	mdWords       = 24
)

// pcln is the parsed .gopclntab: the function table of the whole program,
// which survives stripping (the runtime needs it for tracebacks).
type pcln struct {
	// table is debug/gosym's parse, only for pclntabs whose function
	// records are not read here (funcs is nil: Go 1.16–1.17 layouts, or a
	// Go release whose layout is not known).
	table      *gosym.Table
	addr       uint64 // virtual address of the pclntab
	textStart  uint64 // address the function entry offsets are relative to
	textSource string // where textStart came from, for diagnostics
	// funcs reads the function records gosym does not expose, for inline
	// trees; nil, with funcsErr saying why, when they cannot be read.
	funcs    *funcTab
	funcsErr error
}

// lineTable parses the pclntab once.
func (b *Binary) lineTable() (*pcln, error) {
	b.pclnOnce.Do(func() { b.pcln, b.pclnErr = b.loadPcln() })
	return b.pcln, b.pclnErr
}

func (b *Binary) loadPcln() (p *pcln, err error) {
	defer recoverCorrupt(&err, "parse .gopclntab")
	var sect *elf.Section
	for _, name := range []string{".gopclntab", ".data.rel.ro.gopclntab"} {
		if s := b.elf.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
			sect = s
			break
		}
	}
	if sect == nil {
		return nil, corruptf("no .gopclntab section: %v", ErrNotFound)
	}
	if sect.Size > 1<<31 {
		return nil, corruptf("section %s is %d bytes", sect.Name, sect.Size)
	}
	p = &pcln{addr: sect.Addr}
	hdrLen := 8 + 8*b.ptr
	// The table is read from the file a page at a time (see pclnData):
	// only debug/gosym, for the layouts read here, and a compressed
	// section (never, for a pclntab the loader maps) need it whole.
	var table *pclnData
	if sect.Flags&elf.SHF_COMPRESSED == 0 {
		table = newPclnFile(b.r, int64(sect.Offset), sect.Size)
	} else {
		data, err := sect.Data()
		if err != nil {
			return nil, corruptf("read section %s: %v", sect.Name, err)
		}
		table = newPclnData(data, nil, 0)
	}
	if table.size < uint64(hdrLen) {
		return nil, corruptf("pclntab is %d bytes", table.size)
	}
	h, ok := table.at(0, uint64(hdrLen))
	if !ok {
		return nil, corruptf("read the pclntab header")
	}
	hdr := append([]byte(nil), h...)
	var md moduledata
	magic := b.order.Uint32(hdr)
	switch magic {
	case pclnMagic116:
		p.textSource = "absolute entries (Go 1.16 format)"
		p.funcsErr = fmt.Errorf("inline trees of the Go 1.16 pclntab format: %w", ErrNotFound)
	case pclnMagic118, pclnMagic120:
		if hdr[7] != byte(b.ptr) {
			return nil, corruptf("pclntab pointer size %d", hdr[7])
		}
		md = b.moduledata(p.addr, hdr)
		p.textStart, p.textSource, err = b.textStart(md, hdr)
		if err != nil {
			return nil, err
		}
	default:
		return nil, corruptf("unknown pclntab magic %#x", magic)
	}
	if err := b.checkPclnHeader(hdr, table.size); err != nil {
		return nil, err
	}
	if p.funcsErr == nil {
		p.funcs, p.funcsErr = b.loadFuncTab(table, hdr, magic, p.textStart, md)
	}
	if p.funcs != nil {
		// The function records answer every lookup; debug/gosym's table
		// would hold every function's name in memory (100 MB for
		// kube-apiserver).
		return p, nil
	}
	data, err := table.all()
	if err != nil {
		return nil, corruptf("read section %s: %v", sect.Name, err)
	}
	p.table, err = gosym.NewTable(nil, gosym.NewLineTable(data, p.textStart))
	if err != nil {
		return nil, corruptf("parse pclntab: %v", err)
	}
	if len(p.table.Funcs) == 0 {
		return nil, corruptf("pclntab lists no functions")
	}
	return p, nil
}

// checkPclnHeader bounds the header's counts and offsets by the table's
// size before debug/gosym sees them: gosym recovers from its own parse
// panics and then allocates by the unchecked function count, so a corrupt
// count would exhaust memory instead of failing.
func (b *Binary) checkPclnHeader(hdr []byte, size uint64) error {
	word := func(i int) uint64 { return b.uintptr(hdr[8+i*b.ptr:]) }
	nfunc, nfiles := word(0), word(1)
	// Offsets start at word 3 (word 2 was textStart) and functab holds
	// uint32s, except in the Go 1.16 format.
	first, fieldSize := 3, uint64(4)
	if b.order.Uint32(hdr) == pclnMagic116 {
		first, fieldSize = 2, uint64(b.ptr)
	}
	for i := first; i < first+5; i++ {
		if word(i) >= size {
			return corruptf("pclntab header word %d is %#x, past the table's %d bytes", i, word(i), size)
		}
	}
	functab := word(first + 4)
	if nfunc == 0 || nfunc > (size-functab)/(2*fieldSize) {
		return corruptf("pclntab claims %d functions in %d bytes", nfunc, size)
	}
	if nfiles > size {
		return corruptf("pclntab claims %d files in %d bytes", nfiles, size)
	}
	return nil
}

// textStart finds the address that pclntab function offsets are relative to.
// Go 1.18–1.25 wrote it into the pclntab header; Go 1.26 writes 0 there
// (the field would need a relocation) and the runtime takes it from
// runtime.firstmoduledata.text, so that is the source of truth here too. The
// header and the runtime.text symbol are fallbacks for odd binaries.
func (b *Binary) textStart(md moduledata, hdr []byte) (uint64, string, error) {
	err := md.err
	if err == nil {
		text, etext := md.words[mdText], md.words[mdEtext]
		if text < etext && b.executable(text) {
			return text, "moduledata (" + md.how + ")", nil
		}
		err = corruptf("moduledata text range %#x–%#x is not executable", text, etext)
	}
	if ts := b.uintptr(hdr[8+2*b.ptr:]); ts != 0 && b.executable(ts) {
		return ts, "pclntab header", nil
	}
	if s, ok, serr := b.symbol("runtime.text"); serr == nil && ok && b.executable(s.Value) {
		return s.Value, "symbol runtime.text", nil
	}
	return 0, "", fmt.Errorf("find text start: %w", err)
}

// moduledata is runtime.firstmoduledata as found in the file.
type moduledata struct {
	addr   uint64            // its address
	words  []uint64          // its first mdWords words
	how    string            // how it was found, for diagnostics
	relocs map[uint64]uint64 // the file's relative relocations, to read further words
	err    error             // why it was not found; the other fields are then zero
}

// mdWord reads word i of moduledata, which may lie past the first mdWords.
func (b *Binary) mdWord(md moduledata, i int) (uint64, error) {
	if md.err != nil {
		return 0, md.err
	}
	w, err := b.readWords(md.addr+uint64(i*b.ptr), 1, md.relocs)
	if err != nil {
		return 0, err
	}
	return w[0], nil
}

// moduledata finds runtime.firstmoduledata by its symbol, by the
// .go.module section (Go 1.26+), or by scanning the data sections for a
// word that points at the pclntab and is followed by a pointer to the
// function name table: that pair is the start of moduledata (pcHeader,
// funcnametab).
func (b *Binary) moduledata(pclnAddr uint64, hdr []byte) moduledata {
	relocs := b.relativeRelocs()
	funcnames := pclnAddr + b.uintptr(hdr[8+3*b.ptr:])
	found := func(addr uint64, how string) (moduledata, bool) {
		md, err := b.readWords(addr, mdWords, relocs)
		if err != nil || md[mdPCHeader] != pclnAddr || md[mdFuncnametab] != funcnames {
			return moduledata{}, false
		}
		return moduledata{addr: addr, words: md, how: how, relocs: relocs}, true
	}
	if s, ok, err := b.symbol("runtime.firstmoduledata"); err == nil && ok {
		if md, ok := found(s.Value, "symbol runtime.firstmoduledata"); ok {
			return md
		}
	}
	if s := b.elf.Section(".go.module"); s != nil {
		if md, ok := found(s.Addr, "section .go.module"); ok {
			return md
		}
	}
	for _, name := range []string{".noptrdata", ".data", ".data.rel.ro", ".go.module"} {
		s, data, err := b.sectionData(name)
		if err != nil {
			continue
		}
		for off := 0; off+b.ptr <= len(data); off += b.ptr {
			if b.uintptr(data[off:]) == pclnAddr {
				if md, ok := found(s.Addr+uint64(off), "scan of "+name); ok {
					return md
				}
			}
		}
	}
	// Position-independent executables linked externally may keep the
	// pointer only in a relocation.
	for at, val := range relocs {
		if val == pclnAddr {
			if md, ok := found(at, "scan of relocations"); ok {
				return md
			}
		}
	}
	return moduledata{err: corruptf("no runtime.firstmoduledata pointing at the pclntab %#x", pclnAddr)}
}

// readWords reads n pointer-sized words at addr. A zero word that has an
// R_*_RELATIVE relocation takes the relocation's addend, which is the value
// the dynamic loader will store there.
func (b *Binary) readWords(addr uint64, n int, relocs map[uint64]uint64) ([]uint64, error) {
	data, err := b.read(addr, uint64(n*b.ptr))
	if err != nil {
		return nil, err
	}
	words := make([]uint64, n)
	for i := range words {
		words[i] = b.uintptr(data[i*b.ptr:])
		if words[i] == 0 {
			words[i] = relocs[addr+uint64(i*b.ptr)]
		}
	}
	return words, nil
}

// relativeRelocs returns the R_X86_64_RELATIVE / R_AARCH64_RELATIVE
// relocations of the file, as address → addend. Only PIE binaries have them.
func (b *Binary) relativeRelocs() map[uint64]uint64 {
	relocs := map[uint64]uint64{}
	if !b.PIE {
		return relocs
	}
	var relative uint32
	switch b.elf.Machine {
	case elf.EM_X86_64:
		relative = uint32(elf.R_X86_64_RELATIVE)
	case elf.EM_AARCH64:
		relative = uint32(elf.R_AARCH64_RELATIVE)
	}
	for _, s := range b.elf.Sections {
		if s.Type != elf.SHT_RELA || s.Size > 1<<30 {
			continue
		}
		data, err := s.Data()
		if err != nil {
			continue
		}
		for i := 0; i+24 <= len(data); i += 24 {
			if uint32(b.order.Uint64(data[i+8:])) == relative {
				relocs[b.order.Uint64(data[i:])] = b.order.Uint64(data[i+16:])
			}
		}
	}
	return relocs
}
