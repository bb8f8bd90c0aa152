package gobin

import (
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/arch/arm64/arm64asm"
	"golang.org/x/arch/x86/x86asm"
)

// disasmFuncs are checked against go tool objdump.
var disasmFuncs = []string{
	"main.main",
	"context.WithDeadlineCause",
	"context.(*timerCtx).cancel",
	"net/http.(*Client).do",
}

// TestReturnsDecodeToRET proves that Returns lists exactly the RET
// instructions go tool objdump shows, and that the file offset of each
// decodes to a RET, in every variant (stripped ones are compared with their
// unstripped twin of the same mode).
func TestReturnsDecodeToRET(t *testing.T) {
	want := map[string][]uint64{} // mode/func → RET addresses per objdump
	for _, v := range variants {
		if !v.symtab {
			continue
		}
		for _, name := range disasmFuncs {
			key := v.mode + "/" + name
			if _, ok := want[key]; ok {
				continue
			}
			for _, l := range objdump(t, build(t, v), name) {
				if l.asm == "RET" {
					want[key] = append(want[key], l.addr)
				}
			}
		}
	}
	forEachVariant(t, func(t *testing.T, v variant, b *Binary) {
		data, err := os.ReadFile(b.Path)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range disasmFuncs {
			fn, err := b.Func(name)
			if err != nil {
				t.Fatal(err)
			}
			rets, err := b.Returns(fn)
			if err != nil {
				t.Fatalf("Returns(%s): %v", name, err)
			}
			if w := want[v.mode+"/"+name]; !slices.Equal(rets, w) {
				t.Errorf("Returns(%s) = %x, objdump shows RET at %x", name, rets, w)
			}
			for _, r := range rets {
				off, err := b.FileOffset(r)
				if err != nil {
					t.Fatal(err)
				}
				if !isRET(t, v.goarch, data[off:]) {
					t.Errorf("%s: %#x (file offset %#x) does not decode to RET", name, r, off)
				}
			}
		}
	})
}

func isRET(t *testing.T, arch string, code []byte) bool {
	switch arch {
	case "amd64":
		in, err := x86asm.Decode(code, 64)
		return err == nil && in.Op == x86asm.RET
	case "arm64":
		in, err := arm64asm.Decode(code[:4])
		return err == nil && in.Op == arm64asm.RET
	}
	t.Fatalf("arch %s", arch)
	return false
}

// TestAfterPrologue proves AfterPrologue returns the instruction after the
// stack check's branch to morestack (per objdump), and Entry for a function
// without a stack check.
func TestAfterPrologue(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant, b *Binary) {
		if !v.symtab {
			t.Skip("objdump oracle needs symbols; stripped twins are covered by TestDeadlineSites")
		}
		for _, name := range disasmFuncs {
			fn, err := b.Func(name)
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.AfterPrologue(fn)
			if err != nil {
				t.Fatal(err)
			}
			lines := objdump(t, b.Path, name)
			want := uint64(0)
			for i, l := range lines[:min(len(lines), prologueWindow)] {
				if (strings.HasPrefix(l.asm, "JBE ") || strings.HasPrefix(l.asm, "BLS ")) && i+1 < len(lines) {
					want = lines[i+1].addr
					break
				}
			}
			if want == 0 {
				t.Fatalf("objdump shows no stack check in %s: %+v", name, lines[:4])
			}
			if got != want {
				t.Errorf("AfterPrologue(%s) = %#x, want %#x", name, got, want)
			}
		}
		// runtime.memmove is assembly marked NOSPLIT: no stack check.
		fn, err := b.Func("runtime.memmove")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := b.AfterPrologue(fn); err != nil || got != fn.Entry {
			t.Errorf("AfterPrologue(runtime.memmove) = %#x, %v; want Entry %#x", got, err, fn.Entry)
		}
	})
}

// TestCallSites proves CallSites finds exactly the calls objdump shows.
func TestCallSites(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant, b *Binary) {
		if !v.symtab {
			t.Skip("objdump oracle needs symbols; stripped twins are covered by TestDeadlineSites")
		}
		caller, err := b.Func("main.main")
		if err != nil {
			t.Fatal(err)
		}
		// main.main calls WithTimeout and (*Client).do directly (Client.Do is
		// inlined); whether dep.Nested is inlined is up to the compiler.
		for _, callee := range []string{"context.WithTimeout", "net/http.(*Client).do", "example.com/dep.Nested"} {
			fn, err := b.Func(callee)
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.CallSites(caller, fn)
			if err != nil {
				t.Fatal(err)
			}
			var want []uint64
			for _, l := range objdump(t, b.Path, caller.Name) {
				if l.asm == "CALL "+callee+"(SB)" {
					want = append(want, l.addr)
				}
			}
			if len(want) == 0 && callee != "example.com/dep.Nested" {
				t.Errorf("objdump shows no call from main.main to %s", callee)
			}
			if !slices.Equal(got, want) {
				t.Errorf("CallSites(main.main, %s) = %x, objdump shows %x", callee, got, want)
			}
		}
	})
}
