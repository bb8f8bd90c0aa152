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
func fuzzSeed(f *testing.F, goarch string) []byte {
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
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
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
		}
		b.DeadlineSites()
		b.FieldOffset("runtime.g", "goid")
	})
}
