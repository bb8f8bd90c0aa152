package gobin

import (
	"bytes"
	"flag"
	"testing"

	"github.com/timeout-tracer/tracer/lab/fuzzcorpus"
)

var writeCorpus = flag.Bool("corpus.write", false, "write the fuzzers' seed corpora into testdata/fuzz from real binaries")

// TestWriteFuzzCorpus makes the committed seed corpora of the binary
// readers from real Go executables: fragments of the amd64 and arm64
// builds of the fuzz seed program (ELF and program headers, pclntab and
// moduledata heads), and, for the patching fuzzers, the real bytes of the
// arm64 build's structures written over the amd64 build's (same program,
// other layout: every field plausible, many wrong for this file).
// The DWARF fuzzer gets the arm64 build's abbreviations and entries.
// Run with -corpus.write; without it the test says so and skips.
func TestWriteFuzzCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("writes the fuzz corpora only with -corpus.write")
	}
	const dir = "testdata/fuzz"
	amd, arm := fuzzSeed(t, "amd64"), fuzzSeed(t, "arm64")
	ba, err := newBinary("amd64", bytes.NewReader(amd), nil)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := newBinary("arm64", bytes.NewReader(arm), nil)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	section := func(b *Binary, data []byte, name string, n uint64) []byte {
		s := b.elf.Section(name)
		if s == nil || s.Type == 8 {
			t.Fatalf("%s: no %s", b.ExePath, name)
		}
		return data[s.Offset : s.Offset+min(n, s.Size)]
	}
	// FuzzOpen: heads of real executables (ELF header, program headers,
	// the start of the first segment): every path that reads the headers.
	for _, c := range []struct {
		label string
		data  []byte
	}{{"amd64-head", amd[:1024]}, {"arm64-head", arm[:1024]}, {"amd64-elfheader", amd[:64]},
		{"amd64-pclntab", section(ba, amd, ".gopclntab", 2048)}, {"arm64-gomodule", section(bb, arm, ".go.module", 1024)}} {
		must(fuzzcorpus.Write(dir, "FuzzOpen", c.label, c.data))
	}
	// FuzzOpenPatched spans: 0 ELF+program headers, 1 section headers,
	// 2 .gopclntab, 3 .go.module, 4 .go.buildinfo, 5 .noptrdata, 6 .rodata.
	shA := uint64(len(arm)) - 64*uint64(len(bb.elf.Sections))
	for _, c := range []struct {
		label string
		which uint8
		off   uint32
		patch []byte
	}{
		{"arm64-elfheader", 0, 0, arm[:64]},
		{"arm64-proghdrs", 0, 64, arm[64 : 64+56*2]},
		{"arm64-sectionhdrs", 1, 64, arm[shA+64 : shA+64*4]},
		{"arm64-pclntab-header", 2, 0, section(bb, arm, ".gopclntab", 72)},
		{"arm64-pclntab-funcs", 2, 72, section(bb, arm, ".gopclntab", 512)[72:]},
		{"arm64-moduledata", 3, 0, section(bb, arm, ".go.module", 256)},
		{"arm64-buildinfo", 4, 0, section(bb, arm, ".go.buildinfo", 64)},
	} {
		must(fuzzcorpus.Write(dir, "FuzzOpenPatched", c.label, c.which, c.off, c.patch))
	}
	// FuzzFrames spans: 0 pclntab, 1 function table, 2 PC-value tables,
	// 3 FUNCDATA, 4 .go.module; the PC inside context.WithTimeout.
	fn, err := ba.Func("context.WithTimeout")
	must(err)
	pc := uint32(fn.Entry - ba.elf.Section(".text").Addr + 5)
	pa, err := bb.lineTable()
	must(err)
	ft, err := pa.funcs.data.all()
	must(err)
	for _, c := range []struct {
		label string
		which uint8
		off   uint32
		patch []byte
	}{
		{"arm64-pclntab-header", 0, 0, ft[:64]},
		{"arm64-functab", 1, 0, ft[pa.funcs.functab : pa.funcs.functab+256]},
		{"arm64-pctab", 2, 0, ft[pa.funcs.pctab : pa.funcs.pctab+256]},
		{"arm64-moduledata", 4, 0, section(bb, arm, ".go.module", 256)},
	} {
		must(fuzzcorpus.Write(dir, "FuzzFrames", c.label, c.which, c.off, c.patch, pc))
	}
	// FuzzOTelPatched spans: 0 ELF header, 1 .go.module, 2 .itablink,
	// 3 .go.buildinfo, 4 .noptrdata, 5 the type section, then itabs:
	// the context program's structures over the OTel program's.
	for _, c := range []struct {
		label string
		which uint16
		patch []byte
	}{
		{"ctxprog-moduledata", 1, section(ba, amd, ".go.module", 512)},
		{"ctxprog-itablink", 2, section(ba, amd, ".itablink", 256)},
		{"ctxprog-buildinfo", 3, section(ba, amd, ".go.buildinfo", 64)},
		{"ctxprog-noptrdata", 4, section(ba, amd, ".noptrdata", 256)},
	} {
		must(fuzzcorpus.Write(dir, "FuzzOTelPatched", c.label, c.which, uint32(0), c.patch))
	}
	// FuzzDWARF spans: 0 .debug_abbrev, 1 the start of .debug_info, 2..
	// the entries of the structs the tracer reads: the arm64 build's.
	darm := dwarfSeed(t, "arm64")
	db, err := newBinary("arm64-dwarf", bytes.NewReader(darm), nil)
	must(err)
	idx, err := db.dwarfTypes()
	must(err)
	info := section(db, darm, ".debug_info", 1<<30)
	gAt := idx.structs["runtime.g"]
	for _, c := range []struct {
		label string
		which uint8
		patch []byte
	}{
		{"arm64-abbrev", 0, section(db, darm, ".debug_abbrev", 256)},
		{"arm64-info-header", 1, info[:64]},
		{"arm64-runtime-g-entry", 2, info[gAt : gAt+192]},
	} {
		must(fuzzcorpus.Write(dir, "FuzzDWARF", c.label, c.which, uint32(0), c.patch))
	}
}
