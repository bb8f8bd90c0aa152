package gobin

import (
	"strings"
	"testing"
)

// TestClientTimeoutCancel proves net/http's doCancel is found by what it
// does in every variant (stripped and PIE included): the closure found
// starts on the `doCancel := func()` line of setRequestCancel, and a
// stripped build finds the same address as its unstripped twin.
func TestClientTimeoutCancel(t *testing.T) {
	entries := map[string]uint64{}
	forEachVariant(t, func(t *testing.T, v variant, b *Binary) {
		fn, err := b.ClientTimeoutCancel()
		if err != nil {
			t.Fatal(err)
		}
		checkDoCancel(t, b, fn)
		if e, ok := entries[v.mode]; ok && e != fn.Entry {
			t.Errorf("entry %#x, its twin's %#x", fn.Entry, e)
		}
		entries[v.mode] = fn.Entry
	})
}

// checkDoCancel checks fn is setRequestCancel's doCancel closure by its
// source line.
func checkDoCancel(t *testing.T, b *Binary, fn Func) {
	t.Helper()
	if !strings.HasPrefix(fn.Name, fnSetRequestCancel+".func") {
		t.Errorf("found %s", fn.Name)
	}
	if line := sourceLine(t, b.Symbolize(fn.Entry)); !strings.Contains(line, "doCancel := func()") {
		t.Errorf("%s starts at %q, want doCancel's line", fn.Name, line)
	}
}
