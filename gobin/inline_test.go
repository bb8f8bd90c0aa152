package gobin

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// inlineTarget records its own stacks from inside inlined code and prints
// what runtime.Callers and runtime.CallersFrames say about every logical
// frame: the oracle for Frames. Lines marked "// L:name" are the call sites
// the static checks expect.
const inlineTarget = `package main

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"time"
)

func main() {
	fmt.Printf("main %#x\n", reflect.ValueOf(main).Pointer())
	outer()
	useGen()
	func() {
		capture("closure") // L:closure
	}()
	alreadyPast(&probe{Context: context.Background()})
	withTimeout(&probe{Context: context.Background()})
}

// capture prints the logical frames of its caller's stack, each with the
// PC runtime.Callers gave for it.
//
//go:noinline
func capture(name string) {
	var buf [64]uintptr
	pcs := buf[:runtime.Callers(2, buf[:])]
	fmt.Println("stack", name)
	frames := runtime.CallersFrames(pcs)
	for i := 0; ; i++ {
		f, more := frames.Next()
		fmt.Printf("frame\t%#x\t%v\t%s\t%s\t%d\n", f.PC, f.Func == nil, f.Function, f.File, f.Line)
		if !more {
			return
		}
	}
}

// The chain outer → middle → inner → record is inlined into outer: the
// call to capture carries four logical frames.
//
//go:noinline
func outer() {
	middle() // L:outer
}

func middle() {
	inner() // L:middle
}

func inner() {
	record() // L:inner
}

func record() {
	capture("chain") // L:record
}

// gen is generic: its inlined name carries shape arguments
// ("main.gen[go.shape.int]") that the runtime prints as "[...]".
func gen[T any](x T) T {
	capture("generic") // L:gen
	return x
}

//go:noinline
func useGen() int {
	return gen(1) // L:useGen
}

// probe records the stack when context.WithDeadline(Cause) asks its parent
// for a deadline.
type probe struct{ context.Context }

func (p *probe) Deadline() (time.Time, bool) {
	capture("deadline")
	return time.Time{}, false
}

// alreadyPast has context.WithDeadline inlined (Go 1.21+, where it only
// calls WithDeadlineCause).
//
//go:noinline
func alreadyPast(parent context.Context) {
	_, cancel := context.WithDeadline(parent, time.Unix(1, 0)) // L:alreadyPast
	cancel()
}

// withTimeout calls context.WithTimeout, which has WithDeadline inlined.
//
//go:noinline
func withTimeout(parent context.Context) {
	_, cancel := context.WithTimeout(parent, time.Hour) // L:withTimeout
	cancel()
}
`

// inlineMarker returns the line of the "// L:name" marker in inlineTarget.
func inlineMarker(t *testing.T, name string) int {
	t.Helper()
	for i, l := range strings.Split(inlineTarget, "\n") {
		if strings.HasSuffix(l, "// L:"+name) {
			return i + 1
		}
	}
	t.Fatalf("inlineTarget has no marker L:%s", name)
	return 0
}

// buildInlineTarget builds inlineTarget with go build args into dir, with
// the toolchain tc ("" for the one running the tests; others only from the
// module cache).
func buildInlineTarget(t *testing.T, dir, tc string, v variant) string {
	t.Helper()
	if v.cgo {
		if _, err := exec.LookPath("gcc"); err != nil {
			t.Skipf("variant %s needs gcc for external linking: %v", v.name, err)
		}
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"go.mod":  "module example.com/inline\n\ngo 1.18\n",
		"main.go": inlineTarget,
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"GOARCH=" + v.goarch, "CGO_ENABLED=0"}
	if v.cgo {
		env[1] = "CGO_ENABLED=1"
	}
	if tc != "" {
		env = append(env, "GOTOOLCHAIN="+tc, "GOPROXY=off")
	}
	out := filepath.Join(dir, tc+v.name)
	args := append(append([]string{"build", "-o", out}, v.args...), ".")
	cmd := exec.Command("go", args...)
	cmd.Dir = src
	cmd.Env = goEnv(env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return out
}

// runtimeFrame is one frame as the running target reported it.
type runtimeFrame struct {
	pc      uint64 // Frame.PC: the call instruction (or, inlined, the call site marker) in the frame
	inlined bool   // Frame.Func == nil
	Frame
}

// runtimeStacks runs the target and parses its report: the run-time
// address of main.main and each recorded stack by name.
func runtimeStacks(t *testing.T, path string) (mainAddr uint64, stacks map[string][][]runtimeFrame) {
	t.Helper()
	out, err := exec.Command(path).Output()
	if err != nil {
		t.Fatalf("run %s: %v", path, err)
	}
	stacks = map[string][][]runtimeFrame{}
	var cur string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		switch {
		case strings.HasPrefix(f[0], "main "):
			mainAddr, err = strconv.ParseUint(strings.TrimPrefix(f[0], "main 0x"), 16, 64)
		case strings.HasPrefix(f[0], "stack "):
			cur = strings.TrimPrefix(f[0], "stack ")
			stacks[cur] = append(stacks[cur], nil)
		case f[0] == "frame" && len(f) == 6 && cur != "":
			var fr runtimeFrame
			fr.pc, err = strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
			fr.inlined = f[2] == "true"
			fr.Function, fr.File = f[3], f[4]
			if err == nil {
				fr.Line, err = strconv.Atoi(f[5])
			}
			s := stacks[cur]
			s[len(s)-1] = append(s[len(s)-1], fr)
		default:
			err = fmt.Errorf("unexpected line")
		}
		if err != nil {
			t.Fatalf("target output %q: %v", sc.Text(), err)
		}
	}
	if mainAddr == 0 || len(stacks) == 0 {
		t.Fatalf("target printed no address or stacks:\n%s", out)
	}
	return mainAddr, stacks
}

// checkFramesAgainstRuntime runs the target and compares Frames, at the
// link-time address of every PC the runtime reported, with the frames the
// runtime derived from that PC: the frame itself and the logical callers up
// to and including its physical function.
func checkFramesAgainstRuntime(t *testing.T, b *Binary) {
	t.Helper()
	mainAddr, stacks := runtimeStacks(t, b.Path)
	mainFn, err := b.Func("main.main")
	if err != nil {
		t.Fatal(err)
	}
	bias := mainAddr - mainFn.Entry // the PIE load bias
	if !b.PIE && bias != 0 {
		t.Fatalf("main.main runs at %#x, links at %#x, in a non-PIE executable", mainAddr, mainFn.Entry)
	}
	inlinedSeen := 0
	for name, list := range stacks {
		for _, stack := range list {
			for k, fr := range stack {
				j := k
				for j < len(stack) && stack[j].inlined {
					j++
				}
				if j == len(stack) {
					t.Fatalf("stack %s: frame %d (%s) has no physical frame after it", name, k, fr.Function)
				}
				var want []Frame
				for _, w := range stack[k : j+1] {
					want = append(want, w.Frame)
				}
				if fr.inlined {
					inlinedSeen++
				}
				if got := b.Frames(fr.pc - bias); !slices.Equal(got, want) {
					t.Errorf("stack %s: Frames(%#x) =\n\t%v\nruntime says\n\t%v", name, fr.pc-bias, got, want)
				}
			}
		}
	}
	// The comparison proves something only if the compiler inlined what the
	// target intends: the chain alone holds three inlined frames.
	if chain := stacks["chain"]; len(chain) != 1 || len(chain[0]) < 4 || !chain[0][2].inlined {
		t.Fatalf("target not inlined as the test needs: chain stack %v", chain)
	}
	if inlinedSeen < 5 {
		t.Fatalf("only %d inlined frames in the target's stacks", inlinedSeen)
	}
}

// callFrames returns Frames at the single call from caller to callee.
func callFrames(t *testing.T, b *Binary, caller, callee string) []Frame {
	t.Helper()
	from, err := b.Func(caller)
	if err != nil {
		t.Fatal(err)
	}
	to, err := b.Func(callee)
	if err != nil {
		t.Fatal(err)
	}
	sites, err := b.CallSites(from, to)
	if err != nil || len(sites) != 1 {
		t.Fatalf("calls from %s to %s: %#x, %v", caller, callee, sites, err)
	}
	frames := b.Frames(sites[0])
	strs := b.SymbolizeFrames(sites[0])
	if len(strs) != len(frames) || len(frames) == 0 {
		t.Fatalf("SymbolizeFrames = %q for %d frames", strs, len(frames))
	}
	for i := range frames {
		if strs[i] != fmt.Sprintf("%s (%s:%d)", frames[i].Function, frames[i].File, frames[i].Line) {
			t.Errorf("SymbolizeFrames[%d] = %q for %+v", i, strs[i], frames[i])
		}
	}
	if got := b.Symbolize(sites[0]); got != strs[0] {
		t.Errorf("Symbolize = %q, SymbolizeFrames[0] = %q", got, strs[0])
	}
	return frames
}

// wantFrame checks a frame's function and line and that its file is
// fileSuffix.
func wantFrame(t *testing.T, got Frame, function, fileSuffix string, line int) {
	t.Helper()
	if got.Function != function || !strings.HasSuffix(got.File, fileSuffix) || line > 0 && got.Line != line {
		t.Errorf("frame %v, want %s (…%s:%d)", got, function, fileSuffix, line)
	}
}

// checkFramesStatic checks Frames at call sites found by disassembly against
// the target's source: the marked lines and, for the context package, the
// toolchain's own source text. It needs no execution, so it covers arm64.
func checkFramesStatic(t *testing.T, b *Binary) {
	t.Helper()
	chain := callFrames(t, b, "main.outer", "main.capture")
	if len(chain) != 4 {
		t.Fatalf("Frames at the chain's capture call = %v, want record, inner, middle, outer", chain)
	}
	for i, name := range []string{"record", "inner", "middle", "outer"} {
		wantFrame(t, chain[i], "main."+name, "/main.go", inlineMarker(t, name))
	}
	gen := callFrames(t, b, "main.useGen", "main.capture")
	if len(gen) != 2 || !strings.HasPrefix(gen[0].Function, "main.gen[") {
		t.Fatalf("Frames at the generic capture call = %v", gen)
	}
	wantFrame(t, gen[0], gen[0].Function, "/main.go", inlineMarker(t, "gen"))
	wantFrame(t, gen[1], "main.useGen", "/main.go", inlineMarker(t, "useGen"))

	if _, minor, _ := goRelease(b.GoVersion); minor < 21 {
		// context.WithDeadline is the whole constructor, not inlined.
		past := callFrames(t, b, "main.alreadyPast", "context.WithDeadline")
		if len(past) != 1 {
			t.Fatalf("Frames at alreadyPast's WithDeadline call = %v", past)
		}
		wantFrame(t, past[0], "main.alreadyPast", "/main.go", inlineMarker(t, "alreadyPast"))
		return
	}
	// context.WithDeadline only calls WithDeadlineCause and is inlined, into
	// user code and into context.WithTimeout.
	past := callFrames(t, b, "main.alreadyPast", "context.WithDeadlineCause")
	if len(past) != 2 {
		t.Fatalf("Frames at alreadyPast's WithDeadlineCause call = %v", past)
	}
	wantFrame(t, past[0], "context.WithDeadline", "context/context.go", 0)
	if src := sourceLine(t, past[0].String()); !strings.Contains(src, "WithDeadlineCause(") {
		t.Errorf("%v is the line %q", past[0], src)
	}
	wantFrame(t, past[1], "main.alreadyPast", "/main.go", inlineMarker(t, "alreadyPast"))
	timeout := callFrames(t, b, "context.WithTimeout", "context.WithDeadlineCause")
	if len(timeout) != 2 {
		t.Fatalf("Frames at WithTimeout's WithDeadlineCause call = %v", timeout)
	}
	if timeout[0] != past[0] {
		t.Errorf("WithDeadline inlined into WithTimeout is %v, into alreadyPast %v", timeout[0], past[0])
	}
	wantFrame(t, timeout[1], "context.WithTimeout", "context/context.go", 0)
	if src := sourceLine(t, timeout[1].String()); !strings.Contains(src, "WithDeadline(") {
		t.Errorf("%v is the line %q", timeout[1], src)
	}
}

// TestFramesMatchRuntime proves Frames expands inlined calls exactly as the
// running program's runtime.CallersFrames does, in every build variant:
// stripped, PIE (comparing at link-time addresses), trimpath and external
// linking are run; arm64 builds, which cannot run here, are checked against
// the source.
func TestFramesMatchRuntime(t *testing.T) {
	dir := t.TempDir()
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			b, err := Open(buildInlineTarget(t, dir, "", v))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			checkGofunc(t, b)
			checkFramesStatic(t, b)
			if v.goarch == runtime.GOARCH {
				checkFramesAgainstRuntime(t, b)
			}
		})
	}
}

// TestFramesOtherToolchains repeats the comparison with every toolchain in
// the module cache (never downloading): Go 1.18–1.19 have another
// inlinedCall and _func layout, Go 1.27 another moduledata.
func TestFramesOtherToolchains(t *testing.T) {
	if testing.Short() {
		t.Skip("builds with several toolchains")
	}
	dir := t.TempDir()
	for _, tc := range otherToolchains {
		t.Run(tc, func(t *testing.T) {
			check := exec.Command("go", "version")
			check.Env = goEnv("GOTOOLCHAIN="+tc, "GOPROXY=off")
			if out, err := check.CombinedOutput(); err != nil || !strings.Contains(string(out), tc) {
				t.Skipf("toolchain %s not in the module cache: %s", tc, out)
			}
			for _, name := range []string{"pie-stripped", "arm64-pie-stripped", "plain"} {
				v := variantNamed(t, name)
				b, err := Open(buildInlineTarget(t, dir, tc, v))
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				if b.GoVersion != tc {
					t.Fatalf("%s: GoVersion %s", name, b.GoVersion)
				}
				checkGofunc(t, b)
				checkFramesStatic(t, b)
				if v.goarch == runtime.GOARCH {
					checkFramesAgainstRuntime(t, b)
				}
			}
		})
	}
}

// checkGofunc checks that the function records are readable and, where
// .symtab names it, that the FUNCDATA base read from moduledata (by a
// per-release word index) is the go:func.* symbol.
func checkGofunc(t *testing.T, b *Binary) {
	t.Helper()
	p, err := b.lineTable()
	if err != nil {
		t.Fatal(err)
	}
	if p.funcs == nil {
		t.Fatalf("no function records: %v", p.funcsErr)
	}
	syms, err := b.symbols()
	if err != nil {
		t.Fatal(err)
	}
	if len(syms) == 0 {
		return
	}
	s, ok := syms["go:func.*"]
	if !ok {
		s, ok = syms["go.func.*"] // before Go 1.20
	}
	if !ok {
		t.Fatalf("%s has .symtab but no go:func.* symbol", b.GoVersion)
	}
	if p.funcs.gofunc != s.Value {
		t.Errorf("moduledata.gofunc = %#x, symbol %s = %#x", p.funcs.gofunc, s.Name, s.Value)
	}
}

// TestFramesUnknownLayout proves the fallback for releases whose layouts
// are not known: one frame, the physical function with the innermost
// position, which is what Symbolize said before inline trees were read.
func TestFramesUnknownLayout(t *testing.T) {
	b, err := Open(buildInlineTarget(t, t.TempDir(), "", variantNamed(t, "stripped")))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.GoVersion = "go1.99.0" // before the lazy pclntab load reads it
	outer, err := b.Func("main.outer")
	if err != nil {
		t.Fatal(err)
	}
	capture, err := b.Func("main.capture")
	if err != nil {
		t.Fatal(err)
	}
	sites, err := b.CallSites(outer, capture)
	if err != nil || len(sites) != 1 {
		t.Fatalf("calls from main.outer to main.capture: %#x, %v", sites, err)
	}
	if p, _ := b.lineTable(); p.funcs != nil {
		t.Fatal("function records read for an unknown release")
	}
	got := b.Frames(sites[0])
	if len(got) != 1 {
		t.Fatalf("Frames = %v, want one frame", got)
	}
	wantFrame(t, got[0], "main.outer", "/main.go", inlineMarker(t, "record"))
	if s := b.SymbolizeFrames(sites[0]); len(s) != 1 || s[0] != b.Symbolize(sites[0]) {
		t.Errorf("SymbolizeFrames = %q, Symbolize = %q", s, b.Symbolize(sites[0]))
	}
	if got := b.Frames(1); got != nil {
		t.Errorf("Frames(1) = %v, want nil", got)
	}
	if got := b.SymbolizeFrames(1); !slices.Equal(got, []string{"0x1"}) {
		t.Errorf("SymbolizeFrames(1) = %q", got)
	}
}
