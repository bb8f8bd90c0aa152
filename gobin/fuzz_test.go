package gobin

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// fuzzSeed builds a tiny real Go program (stripped, so the pclntab path is
// exercised and the input stays near 1 MiB) and returns its bytes.
func fuzzSeed(f testing.TB, goarch string) []byte {
	f.Helper()
	return fuzzSeedWith(f, goarch, "-s -w")
}

// fuzzSeedWith builds the fuzz seed program with these linker flags.
func fuzzSeedWith(f testing.TB, goarch, ldflags string) []byte {
	f.Helper()
	dir := f.TempDir()
	src := "package main\n\nimport (\n\t\"context\"\n\t\"time\"\n)\n\nfunc main() {\n\tctx, cancel := context.WithTimeout(context.Background(), time.Second)\n\tdefer cancel()\n\t<-ctx.Done()\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module seed\n\ngo 1.21\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	out := filepath.Join(dir, "seed")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags="+ldflags, "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = goEnv("GOARCH="+goarch, "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		f.Fatalf("build fuzz seed: %v\n%s", err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		f.Fatal(err)
	}
	return data
}

// FuzzOpen feeds mutated Go executables to the parser and every analysis:
// each must return an error or a result, never panic, and Open's errors must
// carry one of the package's kinds.
func FuzzOpen(f *testing.F) {
	f.Add(fuzzSeed(f, "amd64"))
	f.Add(fuzzSeed(f, "arm64"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := newBinary("fuzz", bytes.NewReader(data), nil)
		if err != nil {
			if !errors.Is(err, ErrNotGo) && !errors.Is(err, ErrGoTooOld) &&
				!errors.Is(err, ErrUnsupportedArch) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open error without a kind: %v", err)
			}
			return
		}
		fn, err := b.Func("main.main")
		if err == nil {
			b.Returns(fn)
			b.AfterPrologue(fn)
			b.CallSites(fn, fn)
			b.Symbolize(fn.Entry)
		}
		b.DeadlineSites()
		b.FieldOffset("runtime.g", "goid")
		b.Funcs("context.")
	})
}

// FuzzOpenPatched overwrites bytes inside the structures the parser trusts
// (ELF and program headers, section headers, pclntab header and function
// table, moduledata, build information, DWARF-free symbol tables) of a real
// binary. Random mutations of a whole 1 MiB executable mostly land in code
// and data; this aims them where parsing decisions are made.
func FuzzOpenPatched(f *testing.F) {
	seed := fuzzSeed(f, "amd64")
	ef, err := newBinary("seed", bytes.NewReader(seed), nil)
	if err != nil {
		f.Fatal(err)
	}
	type span struct{ start, n uint64 }
	spans := []span{{0, 64 + 56*uint64(len(ef.elf.Progs))}}
	if sh := ef.elf.Sections; len(sh) > 0 {
		spans = append(spans, span{uint64(len(seed)) - 64*uint64(len(sh)), 64 * uint64(len(sh))})
	}
	for _, name := range []string{".gopclntab", ".go.module", ".go.buildinfo", ".noptrdata", ".rodata"} {
		if s := ef.elf.Section(name); s != nil && s.Type != 8 { // not SHT_NOBITS
			spans = append(spans, span{s.Offset, min(s.Size, 8192)})
		}
	}
	f.Add(uint8(0), uint32(18), []byte{0x3e, 0})
	f.Add(uint8(2), uint32(8), []byte{0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, which uint8, off uint32, patch []byte) {
		s := spans[int(which)%len(spans)]
		at := s.start + uint64(off)%s.n
		data := bytes.Clone(seed)
		copy(data[at:], patch)
		b, err := newBinary("fuzz", bytes.NewReader(data), nil)
		if err != nil {
			if !errors.Is(err, ErrNotGo) && !errors.Is(err, ErrGoTooOld) &&
				!errors.Is(err, ErrUnsupportedArch) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open error without a kind: %v", err)
			}
			return
		}
		if fn, err := b.Func("main.main"); err == nil {
			b.Returns(fn)
			b.AfterPrologue(fn)
			b.Symbolize(fn.Entry + 1)
			b.SymbolizeFrames(fn.Entry + 1)
		}
		b.DeadlineSites()
		b.FieldOffset("runtime.g", "goid")
	})
}

// FuzzFrames overwrites bytes of the structures the inline walk trusts (the
// pclntab's function table, function records and PC-value tables,
// moduledata, the inline trees under go:func.*) of a real binary, then
// expands a PC anywhere in its text: Frames and the Symbolize functions must
// return, never panic, and never give more frames than the walk allows.
func FuzzFrames(f *testing.F) {
	seed := fuzzSeed(f, "amd64")
	b, err := newBinary("seed", bytes.NewReader(seed), nil)
	if err != nil {
		f.Fatal(err)
	}
	p, err := b.lineTable()
	if err != nil || p.funcs == nil {
		f.Fatalf("seed has no function records: %v %v", err, p.funcsErr)
	}
	type span struct{ start, n uint64 }
	var spans []span
	addSpan := func(addr, n uint64) {
		if off, err := b.FileOffset(addr); err == nil && n > 0 && off < uint64(len(seed)) {
			spans = append(spans, span{off, min(n, uint64(len(seed))-off)})
		}
	}
	ft := p.funcs
	addSpan(p.addr, ft.data.size)                       // the whole pclntab
	addSpan(p.addr+ft.functab, ft.data.size-ft.functab) // function table and records
	addSpan(p.addr+ft.pctab, ft.functab-ft.pctab)       // PC-value tables
	addSpan(ft.gofunc, 1<<16)                           // inline trees and other FUNCDATA
	if s := b.elf.Section(".go.module"); s != nil {
		spans = append(spans, span{s.Offset, s.Size})
	}
	text := b.elf.Section(".text")
	// Seeds: PCs inside context.WithTimeout, which has WithDeadline inlined.
	if fn, err := b.Func("context.WithTimeout"); err == nil {
		for d := uint64(0); d < fn.End-fn.Entry; d += 7 {
			f.Add(uint8(d), uint32(d), []byte{}, uint32(fn.Entry-text.Addr+d))
		}
	}
	f.Add(uint8(1), uint32(4), []byte{0xff, 0xff, 0xff, 0xff}, uint32(0x1000))
	f.Add(uint8(3), uint32(0), []byte{0x7f, 0xff}, uint32(0x20000))
	f.Fuzz(func(t *testing.T, which uint8, off uint32, patch []byte, pcOff uint32) {
		s := spans[int(which)%len(spans)]
		data := bytes.Clone(seed)
		copy(data[s.start+uint64(off)%s.n:], patch)
		b, err := newBinary("fuzz", bytes.NewReader(data), nil)
		if err != nil {
			return
		}
		pc := text.Addr + uint64(pcOff)%text.Size
		if frames := b.Frames(pc); len(frames) > maxInlineDepth+1 {
			t.Fatalf("Frames(%#x) gave %d frames", pc, len(frames))
		}
		if len(b.SymbolizeFrames(pc)) == 0 {
			t.Fatalf("SymbolizeFrames(%#x) is empty", pc)
		}
		b.Symbolize(pc)
	})
}
