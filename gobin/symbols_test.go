package gobin

import (
	"debug/elf"
	"errors"
	"testing"
)

// symbols returns the function and data symbols of .symtab by name through
// debug/elf, or an empty map when the binary is stripped: the oracle of
// the tests for Binary.symbol.
func (b *Binary) symbols() (map[string]elf.Symbol, error) {
	syms, err := b.elf.Symbols()
	if errors.Is(err, elf.ErrNoSymbols) {
		return map[string]elf.Symbol{}, nil
	}
	if err != nil {
		return nil, corruptf("read .symtab: %v", err)
	}
	m := make(map[string]elf.Symbol, len(syms))
	for _, s := range syms {
		t := elf.ST_TYPE(s.Info)
		if (t == elf.STT_FUNC || t == elf.STT_OBJECT) && s.Section != elf.SHN_UNDEF {
			m[s.Name] = s
		}
	}
	return m, nil
}

// TestSymbolAgreesWithDebugELF: every function and data symbol debug/elf
// lists is found by name with the same value, size and kind, and names it
// does not list are not.
func TestSymbolAgreesWithDebugELF(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant, b *Binary) {
		want, err := b.symbols()
		if err != nil {
			t.Fatal(err)
		}
		if (len(want) > 0) != v.symtab {
			t.Fatalf("%d symbols, want symtab=%v", len(want), v.symtab)
		}
		n := 0
		for name, w := range want {
			if n++; n%7 != 0 && name != "main.main" {
				continue // a sample: each lookup scans the table
			}
			got, ok, err := b.symbol(name)
			if err != nil || !ok || got.Value != w.Value || got.Size != w.Size || got.Info != w.Info || got.Section != w.Section {
				t.Fatalf("symbol(%q) = %+v, %v, %v; debug/elf has %+v", name, got, ok, err, w)
			}
		}
		if _, ok, _ := b.symbol("main.noSuchSymbol"); ok {
			t.Error("found a symbol that does not exist")
		}
	})
}
