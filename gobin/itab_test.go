package gobin

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestItabs compares Itabs with the go:itab symbols that go tool nm lists:
// every symbol is an itab Itabs returns, at that address, with the same
// type and interface names, and Itabs returns nothing else. Stripped
// builds must give the same itabs as the build with symbols of the same
// mode (by name only: the build flags recorded in the build information
// differ in length and can shift read-only data).
func TestItabs(t *testing.T) {
	withSyms := map[string]variant{}
	for _, v := range variants {
		if v.symtab {
			withSyms[v.mode] = v
		}
	}
	forEachVariant(t, func(t *testing.T, v variant, b *Binary) {
		itabs, err := b.Itabs()
		if err != nil {
			t.Fatalf("Itabs: %v", err)
		}
		if v.symtab {
			compareItabs(t, itabs, itabSymbols(t, b.Path))
		} else {
			twin := openVariant(t, withSyms[v.mode])
			want, err := twin.Itabs()
			if err != nil {
				t.Fatalf("Itabs of %s: %v", twin.Path, err)
			}
			sameItabNames(t, itabs, want)
		}
		for _, it := range itabs {
			if it.Type.Name == "*context.valueCtx" && it.Interface.Name == "context.Context" {
				return
			}
		}
		t.Error("no *context.valueCtx itab")
	})
}

// localSuffix matches the ".N" the linker appends to function-local type
// names (net/http.I.4), which the runtime's names do not carry.
var localSuffix = regexp.MustCompile(`\.\d+(,|$)`)

// compareItabs checks itabs against the itab symbols by address.
func compareItabs(t *testing.T, itabs []Itab, syms map[uint64]string) {
	t.Helper()
	if len(itabs) != len(syms) {
		t.Errorf("%d itabs, %d itab symbols", len(itabs), len(syms))
	}
	named := 0
	for _, it := range itabs {
		sym, ok := syms[it.Addr]
		if !ok {
			t.Errorf("itab %s,%s at %#x has no symbol", it.Type, it.Interface, it.Addr)
			continue
		}
		sym = strings.TrimPrefix(strings.TrimPrefix(sym, "go:itab."), "go.itab.")
		sym = localSuffix.ReplaceAllString(sym, "$1")
		if want := it.Type.String() + "," + it.Interface.String(); sym != want {
			// Symbols spell type arguments and unnamed types with full
			// package paths throughout; the runtime name qualifies by
			// package name. Those are compared only through the runtime.
			if !strings.ContainsAny(sym, "[{(") {
				t.Errorf("itab at %#x: %s, symbol %s", it.Addr, want, sym)
			}
			continue
		}
		named++
	}
	if named < len(itabs)/2 {
		t.Errorf("only %d of %d itab names compared", named, len(itabs))
	}
}

// sameItabNames checks that two builds of one program have the same itabs
// by type and interface.
func sameItabNames(t *testing.T, got, want []Itab) {
	t.Helper()
	names := func(its []Itab) []string {
		var s []string
		for _, it := range its {
			s = append(s, it.Type.String()+","+it.Interface.String())
		}
		sort.Strings(s)
		return s
	}
	if g, w := names(got), names(want); !slices.Equal(g, w) {
		t.Errorf("itabs\n%v\nwant\n%v", g, w)
	}
}

// itabProgram prints what a running program knows about its itabs and
// type descriptors. It builds with every toolchain from Go 1.18.
const itabProgram = `package main

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"
	"unsafe"
)

type key struct{}

func itab(c context.Context) uintptr { return *(*uintptr)(unsafe.Pointer(&c)) }

func typeWord(v interface{}) uintptr { return *(*uintptr)(unsafe.Pointer(&v)) }

func main() {
	fmt.Printf("main %x\n", reflect.ValueOf(main).Pointer())
	timer, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	value := context.WithValue(timer, key{}, 1)
	cctx, cancel2 := context.WithCancel(value)
	defer cancel2()
	for _, c := range []context.Context{timer, value, cctx} {
		fmt.Printf("itab %x %s\n", itab(c), reflect.TypeOf(c))
	}
	err := errors.New("x")
	fmt.Printf("type %x %s %s\n", typeWord(err), reflect.TypeOf(err), reflect.TypeOf(err).Elem().PkgPath())
	fmt.Printf("type %x %s %s\n", typeWord(key{}), reflect.TypeOf(key{}), reflect.TypeOf(key{}).PkgPath())
}
`

// TestItabsOtherToolchains runs the itab program built by each toolchain
// of otherToolchains that is in the module cache (the moduledata and itab
// layouts differ: Go 1.18–1.19, 1.20–1.25, 1.26, and 1.27 without
// itablinks) and checks Itabs and TypeAddrOf on stripped builds against
// the running program, minus the load bias for PIE; arm64 builds, which
// cannot run here, are checked against their itab symbols.
func TestItabsOtherToolchains(t *testing.T) {
	if testing.Short() {
		t.Skip("builds with several toolchains")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/itabs\n\ngo 1.18\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(itabProgram), 0o644)
	for _, tc := range append([]string{goVersion(t)}, otherToolchains...) {
		t.Run(tc, func(t *testing.T) {
			env := []string{"GOTOOLCHAIN=" + tc, "GOPROXY=off", "CGO_ENABLED=0"}
			check := exec.Command("go", "version")
			check.Env = goEnv(env...)
			if out, err := check.CombinedOutput(); err != nil || !strings.Contains(string(out), tc) {
				t.Skipf("toolchain %s not in the module cache: %s", tc, out)
			}
			buildTC := func(name, goarch string, args ...string) string {
				out := filepath.Join(dir, tc+"-"+name)
				cmd := exec.Command("go", append(append([]string{"build", "-o", out}, args...), ".")...)
				cmd.Dir = dir
				cmd.Env = goEnv(append(env, "GOARCH="+goarch)...)
				if msg, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("build %s: %v\n%s", name, err, msg)
				}
				return out
			}
			for _, args := range [][]string{{"-ldflags=-s -w"}, {"-buildmode=pie", "-ldflags=-s -w"}} {
				path := buildTC(strings.Join(args, ""), "amd64", args...)
				checkItabProgram(t, path)
			}
			var arm [2][]Itab
			for i, args := range [][]string{nil, {"-ldflags=-s -w"}} {
				path := buildTC(fmt.Sprint("arm64-", i), "arm64", args...)
				b, err := Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				if arm[i], err = b.Itabs(); err != nil {
					t.Fatalf("arm64 %v Itabs: %v", args, err)
				}
				// Go 1.27 keeps no itab symbols; its itabs are checked by
				// running the amd64 builds.
				if i == 0 {
					if syms := itabSymbols(t, path); len(syms) > 0 {
						compareItabs(t, arm[i], syms)
					}
				}
			}
			sameItabNames(t, arm[1], arm[0])
		})
	}
}

func checkItabProgram(t *testing.T, path string) {
	t.Helper()
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	itabs, err := b.Itabs()
	if err != nil {
		t.Fatalf("Itabs: %v", err)
	}
	out, err := exec.Command(path).Output()
	if err != nil {
		t.Fatalf("run %s: %v", path, err)
	}
	var bias uint64
	checked := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		addr, err := strconv.ParseUint(f[1], 16, 64)
		if err != nil {
			t.Fatalf("output %q: %v", sc.Text(), err)
		}
		switch f[0] {
		case "main":
			fn, err := b.Func("main.main")
			if err != nil {
				t.Fatal(err)
			}
			bias = addr - fn.Entry
		case "itab":
			found := false
			for _, it := range itabs {
				if it.Type.Name == f[2] && it.Interface == (TypeName{"context.Context", "context"}) {
					found = true
					if it.Addr != addr-bias || it.Type.PkgPath != "context" {
						t.Errorf("%s: itab %#x (%s), running program's %#x (bias %#x)", f[2], it.Addr, it.Type.PkgPath, addr, bias)
					}
				}
			}
			if !found {
				t.Errorf("no itab %s,context.Context", f[2])
			}
			checked++
		case "type":
			got, err := b.TypeAddrOf(f[2], f[3])
			if err != nil || got != addr-bias {
				t.Errorf("TypeAddrOf(%s, %s) = %#x, %v; running program's %#x (bias %#x)", f[2], f[3], got, err, addr, bias)
			}
			checked++
		}
	}
	if checked != 5 {
		t.Errorf("checked %d values:\n%s", checked, out)
	}
	if _, err := b.TypeAddrOf("main.noSuchType", "main"); err == nil {
		t.Error("TypeAddrOf of a missing type succeeded")
	}
}

// TestItabsUnknownRelease: releases whose moduledata layout is not known
// are refused with ErrNoOffsets rather than misread.
func TestItabsUnknownRelease(t *testing.T) {
	b := openVariant(t, variantNamed(t, "stripped"))
	for _, v := range []string{"go1.17.13", "go1.28.0", "go2.0.0"} {
		b.GoVersion = v
		if _, err := b.Itabs(); !errors.Is(err, ErrNoOffsets) {
			t.Errorf("%s: Itabs error %v, want ErrNoOffsets", v, err)
		}
		if _, err := b.TypeAddrOf("*context.valueCtx", "context"); !errors.Is(err, ErrNoOffsets) {
			t.Errorf("%s: TypeAddrOf error %v, want ErrNoOffsets", v, err)
		}
	}
}
