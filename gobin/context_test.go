package gobin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// sourceLine returns the text of a file:line position from a Symbolize
// result, reading the toolchain's own source: the oracle for "this call
// passes DeadlineExceeded".
func sourceLine(t *testing.T, symbolized string) string {
	t.Helper()
	i, j := strings.LastIndex(symbolized, "("), strings.LastIndex(symbolized, ":")
	if i < 0 || j < i {
		t.Fatalf("Symbolize gave %q", symbolized)
	}
	file := symbolized[i+1 : j]
	line, err := strconv.Atoi(strings.TrimSuffix(symbolized[j+1:], ")"))
	if err != nil {
		t.Fatalf("Symbolize gave %q", symbolized)
	}
	if !filepath.IsAbs(file) { // -trimpath: relative to GOROOT/src
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			t.Fatal(err)
		}
		file = filepath.Join(strings.TrimSpace(string(out)), "src", file)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) {
		t.Fatalf("%s has no line %d", file, line)
	}
	return lines[line-1]
}

// TestDeadlineSites proves the expiry probe points are found by behaviour
// in every variant: the timer closure is the closure whose cancel call sits
// on a source line passing DeadlineExceeded, the expired call site in the
// constructor likewise, and stripped builds give the same addresses as
// their unstripped twins.
func TestDeadlineSites(t *testing.T) {
	byMode := map[string]*DeadlineSites{}
	for _, v := range variants { // unstripped first, so twins compare to them
		if !v.symtab {
			continue
		}
		b := openVariant(t, v)
		s, err := b.DeadlineSites()
		if err != nil {
			t.Fatalf("%s: DeadlineSites: %v", v.name, err)
		}
		byMode[v.mode] = s
	}
	forEachVariant(t, func(t *testing.T, v variant, b *Binary) {
		s, err := b.DeadlineSites()
		if err != nil {
			t.Fatal(err)
		}
		if s.Constructor.Name != "context.WithDeadlineCause" {
			t.Errorf("Constructor = %s", s.Constructor.Name)
		}
		if !strings.HasPrefix(s.Timer.Name, "context.WithDeadlineCause.func") {
			t.Errorf("Timer = %s", s.Timer.Name)
		}
		if got := sourceLine(t, b.Symbolize(s.Timer.Entry)); !strings.Contains(got, "time.AfterFunc(") {
			t.Errorf("timer closure starts at %q, want the time.AfterFunc line", got)
		}
		cancel, err := b.Func(fnTimerCtxCancel)
		if err != nil {
			t.Fatal(err)
		}
		inTimer, err := b.CallSites(s.Timer, cancel)
		if err != nil || len(inTimer) != 1 {
			t.Fatalf("timer closure calls cancel at %x (%v), want once", inTimer, err)
		}
		if got := sourceLine(t, b.Symbolize(inTimer[0])); !strings.Contains(got, "DeadlineExceeded") {
			t.Errorf("timer closure's cancel call is on %q", got)
		}
		// Every other closure of the constructor that calls cancel passes
		// Canceled: those are the CancelFuncs and must not be chosen.
		closures, err := b.Funcs(s.Constructor.Name + ".func")
		if err != nil {
			t.Fatal(err)
		}
		others := 0
		for _, fn := range closures {
			sites, _ := b.CallSites(fn, cancel)
			if fn.Entry == s.Timer.Entry || len(sites) == 0 {
				continue
			}
			others++
			if got := sourceLine(t, b.Symbolize(sites[0])); !strings.Contains(got, "Canceled") {
				t.Errorf("%s calls cancel on %q", fn.Name, got)
			}
		}
		if others == 0 {
			t.Errorf("no CancelFunc closure found; the test would not tell the timer closure apart")
		}
		expired := 0
		for _, c := range s.CancelCalls {
			line := sourceLine(t, b.Symbolize(c.Addr))
			if c.Expired != strings.Contains(line, "DeadlineExceeded") {
				t.Errorf("call at %#x on %q has Expired=%v", c.Addr, line, c.Expired)
			}
			if c.Expired {
				expired++
			}
			if off, _ := b.FileOffset(c.Addr); off != c.FileOffset {
				t.Errorf("call at %#x has FileOffset %#x, want %#x", c.Addr, c.FileOffset, off)
			}
		}
		if expired != 1 {
			t.Errorf("%d expired call sites in %+v, want 1", expired, s.CancelCalls)
		}
		after, err := b.AfterPrologue(s.Timer)
		if err != nil || after <= s.Timer.Entry {
			t.Errorf("AfterPrologue(timer) = %#x, %v: the closure has a stack check", after, err)
		}
		if twin := byMode[v.mode]; twin != nil {
			if s.Timer.Entry != twin.Timer.Entry || s.Constructor.Entry != twin.Constructor.Entry ||
				len(s.CancelCalls) != len(twin.CancelCalls) || s.CancelCalls[0] != twin.CancelCalls[0] {
				t.Errorf("sites %+v differ from the unstripped build's %+v", s, twin)
			}
		}
	})
}
