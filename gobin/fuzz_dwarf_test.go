package gobin

import (
	"bytes"
	"errors"
	"testing"
)

// dwarfSeed is the fuzz seed program with its DWARF kept and not
// compressed, so that patches land in the entries the reader decodes.
func dwarfSeed(tb testing.TB, goarch string) []byte {
	tb.Helper()
	return fuzzSeedWith(tb, goarch, "-compressdwarf=false")
}

// dwarfFields are the struct fields the tracer reads from DWARF.
var dwarfFields = [][2]string{
	{"runtime.g", "goid"},
	{"context.timerCtx", "deadline"},
	{"context.timerCtx", "cancelCtx.Context"},
	{"context.cancelCtx", "err"},
	{"context.cancelCtx", "children"},
}

// dwarfSpans are the parts of the seed the DWARF fuzzer patches: the
// abbreviations, the start of .debug_info, and the entries of the structs
// the tracer reads (with what follows: their members).
func dwarfSpans(tb testing.TB, seed []byte) []struct{ start, n uint64 } {
	tb.Helper()
	b, err := newBinary("seed", bytes.NewReader(seed), nil)
	if err != nil {
		tb.Fatal(err)
	}
	info, abbrev := b.elf.Section(".debug_info"), b.elf.Section(".debug_abbrev")
	if info == nil || abbrev == nil || info.Flags&0x800 != 0 { // SHF_COMPRESSED
		tb.Fatal("seed has no uncompressed DWARF")
	}
	idx, err := b.dwarfTypes()
	if err != nil {
		tb.Fatal(err)
	}
	spans := []struct{ start, n uint64 }{{abbrev.Offset, abbrev.Size}, {info.Offset, min(info.Size, 4096)}}
	for _, f := range dwarfFields {
		at, ok := idx.structs[f[0]]
		if !ok {
			tb.Fatalf("seed DWARF has no %s", f[0])
		}
		spans = append(spans, struct{ start, n uint64 }{info.Offset + uint64(at), min(512, info.Size-uint64(at))})
	}
	return spans
}

// FuzzDWARF patches the DWARF of a real Go executable where the reader
// makes its decisions (abbreviations, unit headers, the struct entries the
// tracer reads) and resolves the fields the tracer needs: each gives an
// offset or an error of the package's kinds, never a panic or a hang.
func FuzzDWARF(f *testing.F) {
	seed := dwarfSeed(f, "amd64")
	spans := dwarfSpans(f, seed)
	f.Add(uint8(0), uint32(0), []byte{0xff})
	f.Add(uint8(1), uint32(4), []byte{0x05, 0x00})
	f.Add(uint8(2), uint32(1), []byte{0x7f, 0x7f, 0x7f, 0x7f})
	f.Fuzz(func(t *testing.T, which uint8, off uint32, patch []byte) {
		s := spans[int(which)%len(spans)]
		data := bytes.Clone(seed)
		copy(data[s.start+uint64(off)%s.n:], patch)
		b, err := newBinary("fuzz", bytes.NewReader(data), nil)
		if err != nil {
			return // FuzzOpenPatched checks Open's errors
		}
		for _, fl := range dwarfFields {
			if _, err := b.DWARFFieldOffset(fl[0], fl[1]); err != nil &&
				!errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotFound) && !errors.Is(err, errNoDWARF) {
				t.Fatalf("%s.%s: error without a kind: %v", fl[0], fl[1], err)
			}
		}
	})
}
