package gobin

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// otherToolchains are the releases the analysis claims to support besides
// the one running the tests: go1.18/go1.20 exercise the pre-WithDeadlineCause
// layout, the rest are those of the offsets table.
var otherToolchains = []string{"go1.18.10", "go1.20.14", "go1.21.13", "go1.22.12", "go1.23.12", "go1.24.13", "go1.25.14", "go1.27.3"}

const smallTarget = `package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) > 1 { // links net/http's client (setRequestCancel)
		c := &http.Client{Timeout: time.Second}
		fmt.Println(c.Get(os.Args[1]))
	}
	outer, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	inner, cancel2 := context.WithDeadline(outer, time.Now().Add(time.Millisecond))
	defer cancel2()
	<-inner.Done()
	fmt.Println(inner.Err(), context.WithValue(outer, "k", 1))
}
`

// TestOtherToolchains builds a small target with each toolchain already in
// the module cache (it never downloads; a missing toolchain is skipped) and
// checks what the probes rely on: the deadline sites by source line, Func on
// stripped PIE against the unstripped build, and the offsets table against
// DWARF. Slow on first run (each toolchain compiles its std), so -short
// skips it.
func TestOtherToolchains(t *testing.T) {
	if testing.Short() {
		t.Skip("builds with several toolchains")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/small\n\ngo 1.17\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(smallTarget), 0o644)
	for _, tc := range otherToolchains {
		t.Run(tc, func(t *testing.T) {
			env := []string{"GOTOOLCHAIN=" + tc, "GOPROXY=off", "CGO_ENABLED=0"}
			check := exec.Command("go", "version")
			check.Env = goEnv(env...)
			if out, err := check.CombinedOutput(); err != nil || !strings.Contains(string(out), tc) {
				t.Skipf("toolchain %s not in the module cache: %s", tc, out)
			}
			buildTC := func(name, goarch string, args ...string) *Binary {
				out := filepath.Join(dir, tc+"-"+name)
				cmd := exec.Command("go", append(append([]string{"build", "-o", out}, args...), ".")...)
				cmd.Dir = dir
				cmd.Env = goEnv(append(env, "GOARCH="+goarch)...)
				if msg, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("build %s: %v\n%s", name, err, msg)
				}
				b, err := Open(out)
				if err != nil {
					t.Fatalf("Open(%s): %v", name, err)
				}
				t.Cleanup(func() { b.Close() })
				if b.GoVersion != tc {
					t.Fatalf("%s: GoVersion %s", name, b.GoVersion)
				}
				return b
			}
			for _, arch := range []string{"amd64", "arm64"} {
				plain := buildTC(arch+"-pie", arch, "-buildmode=pie")
				stripped := buildTC(arch+"-pie-stripped", arch, "-buildmode=pie", "-ldflags=-s -w")
				want, err := plain.DeadlineSites()
				if err != nil {
					t.Fatalf("%s: %v", arch, err)
				}
				got, err := stripped.DeadlineSites()
				if err != nil {
					t.Fatalf("%s stripped: %v", arch, err)
				}
				if got.Timer.Entry != want.Timer.Entry || got.Constructor.Entry != want.Constructor.Entry || got.CancelCalls[0] != want.CancelCalls[0] {
					t.Errorf("%s: stripped sites %+v, unstripped %+v", arch, got, want)
				}
				if ctor := want.Constructor.Name; ctor != fnWithDeadlineCause && ctor != fnWithDeadline {
					t.Errorf("%s: constructor %s", arch, ctor)
				}
				cancel, _ := stripped.Func(fnTimerCtxCancel)
				sites, err := stripped.CallSites(got.Timer, cancel)
				if err != nil || len(sites) != 1 {
					t.Fatalf("%s: timer calls cancel at %x, %v", arch, sites, err)
				}
				if line := sourceLine(t, stripped.Symbolize(sites[0])); !strings.Contains(line, "DeadlineExceeded") {
					t.Errorf("%s: timer closure %s cancels on %q", arch, got.Timer.Name, line)
				}
				for _, c := range got.CancelCalls {
					if line := sourceLine(t, stripped.Symbolize(c.Addr)); c.Expired != strings.Contains(line, "DeadlineExceeded") {
						t.Errorf("%s: call on %q has Expired=%v", arch, line, c.Expired)
					}
				}
				if fn, err := stripped.ClientTimeoutCancel(); err != nil {
					t.Errorf("%s: %v", arch, err)
				} else {
					checkDoCancel(t, stripped, fn)
				}
				// Every context type the walk follows, when the binary
				// has its itab: one whose DWARF type is missing (Go
				// 1.22's withoutCancelCtx, its itab kept) is read from
				// the table, not the end of every context walk. From
				// Go 1.21, the first release the table covers (1.20's
				// timerCtx is laid out otherwise: no walk there, said).
				if _, minor, _ := goRelease(tc); minor >= 21 {
					for _, b := range []*Binary{plain, stripped} {
						if _, err := b.ContextItabs(); err != nil {
							t.Errorf("%s: context itabs: %v", arch, err)
						}
					}
				}
				for _, f := range ProbeFields() {
					dw, derr := plain.DWARFFieldOffset(f.Type, f.Path)
					if errors.Is(derr, ErrNotFound) {
						continue // the small target does not link this type (AfterFunc, WithoutCancel)
					}
					tab, terr := stripped.FieldOffset(f.Type, f.Path)
					if errors.Is(terr, ErrNoOffsets) {
						rel, _ := releaseOf(tc)
						if _, covered := goLayoutOffset(t, rel, arch, f); covered {
							t.Errorf("%s: %s.%s: %v though the table covers it", arch, f.Type, f.Path, terr)
						}
						continue
					}
					if derr != nil || terr != nil || dw != tab {
						t.Errorf("%s: %s.%s: DWARF %d (%v), table %d (%v)", arch, f.Type, f.Path, dw, derr, tab, terr)
					}
				}
			}
		})
	}
}
