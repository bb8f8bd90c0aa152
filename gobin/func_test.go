package gobin

import (
	"debug/elf"
	"errors"
	"os"
	"testing"
)

// probedFuncs are functions the tracer attaches to or that the tests use
// as known points.
var probedFuncs = []string{
	"main.main",
	"example.com/dep.Nested",
	"context.WithDeadlineCause",
	"context.(*timerCtx).cancel",
	"net/http.(*Client).do",
	"runtime.memmove",
}

// TestFuncMatchesSymbolsAcrossVariants proves that Func gives the linker's
// own addresses (go tool nm of the unstripped build) for every variant,
// including stripped PIE ones where they come from the pclntab and the Go
// 1.26 text start from moduledata, and that FileOffset points at the same
// bytes as the address.
func TestFuncMatchesSymbolsAcrossVariants(t *testing.T) {
	oracles := map[string]map[string]uint64{} // mode → nm symbols
	for _, v := range variants {
		if v.symtab {
			if _, ok := oracles[v.mode]; !ok {
				oracles[v.mode] = nmSymbols(t, build(t, v))
			}
		}
	}
	forEachVariant(t, func(t *testing.T, v variant, b *Binary) {
		syms, err := b.symbols()
		if err != nil {
			t.Fatal(err)
		}
		if (len(syms) > 0) != v.symtab {
			t.Fatalf("variant has %d symbols, want symtab=%v", len(syms), v.symtab)
		}
		nm := oracles[v.mode]
		for _, name := range probedFuncs {
			fn, err := b.Func(name)
			if err != nil {
				t.Errorf("Func(%s): %v", name, err)
				continue
			}
			if fn.Entry != nm[name] {
				t.Errorf("Func(%s).Entry = %#x, go tool nm says %#x", name, fn.Entry, nm[name])
			}
			if fn.End <= fn.Entry {
				t.Errorf("Func(%s) has range %#x–%#x", name, fn.Entry, fn.End)
			}
			checkFileOffset(t, b, fn)
		}
		p, err := b.lineTable()
		if err != nil {
			t.Fatal(err)
		}
		if p.textStart != nm["runtime.text"] {
			t.Errorf("text start %#x (from %s), runtime.text is %#x", p.textStart, p.textSource, nm["runtime.text"])
		}
		if _, err := b.Func("main.noSuchFunction"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Func(missing) error = %v, want ErrNotFound", err)
		}
	})
}

// checkFileOffset checks FileOffset against the section table: the bytes
// at the offset in the file are the bytes of .text at the address.
func checkFileOffset(t *testing.T, b *Binary, fn Func) {
	t.Helper()
	text := b.elf.Section(".text")
	if text == nil || fn.Entry < text.Addr || fn.Entry >= text.Addr+text.Size {
		t.Fatalf("%s at %#x is outside .text", fn.Name, fn.Entry)
	}
	want := make([]byte, 16)
	if _, err := text.ReadAt(want, int64(fn.Entry-text.Addr)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(b.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, 16)
	if _, err := f.ReadAt(got, int64(fn.FileOffset)); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s: bytes at file offset %#x differ from .text at %#x", fn.Name, fn.FileOffset, fn.Entry)
	}
	if text.Type != elf.SHT_PROGBITS {
		t.Errorf(".text is %v", text.Type)
	}
}

// TestTextStartFromRelocations proves the moduledata fallback for PIE files
// whose pointers live only in R_*_RELATIVE relocations: with the words of
// moduledata zeroed in the file, Func must still give the same entries.
func TestTextStartFromRelocations(t *testing.T) {
	for _, name := range []string{"pie-stripped", "external-pie-stripped", "arm64-pie-stripped"} {
		t.Run(name, func(t *testing.T) {
			v := variantNamed(t, name)
			orig := openVariant(t, v)
			want, err := orig.Func("context.WithDeadlineCause")
			if err != nil {
				t.Fatal(err)
			}
			mod := orig.elf.Section(".go.module")
			if mod == nil {
				t.Skip("no .go.module section (Go < 1.26)")
			}
			data, err := os.ReadFile(orig.Path)
			if err != nil {
				t.Fatal(err)
			}
			clear(data[mod.Offset : mod.Offset+mdWords*8])
			path := t.TempDir() + "/zeroed"
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			b, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			got, err := b.Func("context.WithDeadlineCause")
			if err != nil {
				t.Fatal(err)
			}
			if got.Entry != want.Entry {
				t.Errorf("Entry = %#x, want %#x", got.Entry, want.Entry)
			}
			if p, _ := b.lineTable(); p.textSource != "moduledata (section .go.module)" {
				t.Errorf("text start came from %s", p.textSource)
			}
		})
	}
}

func variantNamed(t *testing.T, name string) variant {
	for _, v := range variants {
		if v.name == name {
			return v
		}
	}
	t.Fatalf("no variant %s", name)
	return variant{}
}

// TestGo126HeaderHasNoTextStart pins down the trap this package avoids:
// from Go 1.26 the pclntab header's textStart word is 0, so function
// addresses computed from it (as tracers did up to Go 1.25) are offsets, not
// addresses; the text start must come from moduledata.
func TestGo126HeaderHasNoTextStart(t *testing.T) {
	b := openVariant(t, variantNamed(t, "pie-stripped"))
	if _, minor, _ := goRelease(b.GoVersion); minor < 26 {
		t.Skipf("%s predates the change", b.GoVersion)
	}
	_, data, err := b.sectionData(".gopclntab")
	if err != nil {
		t.Fatal(err)
	}
	if hdr := b.uintptr(data[8+2*b.ptr:]); hdr != 0 {
		t.Errorf("pclntab header textStart = %#x, expected 0 since Go 1.26", hdr)
	}
	p, err := b.lineTable()
	if err != nil {
		t.Fatal(err)
	}
	if p.textStart == 0 || p.textSource != "moduledata (section .go.module)" {
		t.Errorf("text start %#x from %s", p.textStart, p.textSource)
	}
}
