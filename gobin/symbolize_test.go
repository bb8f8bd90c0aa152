package gobin

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestSymbolize proves a PC maps to its function, file and line, also in
// stripped binaries, whose pclntab survives.
func TestSymbolize(t *testing.T) {
	line := mainLine(t)
	forEachVariant(t, func(t *testing.T, v variant, b *Binary) {
		fn, err := b.Func("main.main")
		if err != nil {
			t.Fatal(err)
		}
		got := b.Symbolize(fn.Entry)
		suffix := fmt.Sprintf("main.go:%d)", line)
		if !strings.HasPrefix(got, "main.main (") || !strings.HasSuffix(got, suffix) {
			t.Errorf("Symbolize(main.main entry) = %q, want main.main (…%s", got, suffix)
		}
		wantFile := "/main.go"
		if v.name == "trimpath" {
			wantFile = "(example.com/target/main.go"
		}
		if !strings.Contains(got, wantFile) {
			t.Errorf("Symbolize = %q, want file %s", got, wantFile)
		}
		if mid := b.Symbolize(fn.Entry + 4); !strings.HasPrefix(mid, "main.main (") {
			t.Errorf("Symbolize(main.main+4) = %q", mid)
		}
		if got := b.Symbolize(1); got != "0x1" {
			t.Errorf("Symbolize(1) = %q, want 0x1", got)
		}
	})
}

// TestConcurrentUse backs the claim that a Binary's methods are safe for
// concurrent use (the lazy tables load once); it matters under -race.
func TestConcurrentUse(t *testing.T) {
	b, err := Open(build(t, variantNamed(t, "plain")))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var wg sync.WaitGroup
	results := make([]string, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn, err := b.Func("main.main")
			if err != nil {
				results[i] = err.Error()
				return
			}
			off, err := b.FieldOffset("context.timerCtx", "deadline")
			if _, derr := b.DeadlineSites(); derr != nil {
				err = derr
			}
			results[i] = fmt.Sprint(b.Symbolize(fn.Entry), off, err)
		}()
	}
	wg.Wait()
	for _, r := range results[1:] {
		if r != results[0] {
			t.Errorf("goroutines disagree: %q vs %q", r, results[0])
		}
	}
}
