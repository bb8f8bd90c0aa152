package gobin

import (
	"strings"
	"testing"
)

// TestReleaseKeepsAnswers: after Release the pclntab is read from the file a
// page at a time, and every PC of the program symbolizes exactly as it did
// from memory; lookups by name still answer (reloading what they need), and
// a second Release drops it again.
func TestReleaseKeepsAnswers(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant, b *Binary) {
		main, err := b.Func("main.main")
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.lineTable()
		if err != nil || p.funcs == nil {
			t.Fatalf("no function records: %v %v", err, p.funcsErr)
		}
		text := b.elf.Section(".text")
		var pcs []uint64
		for pc := text.Addr; pc < text.Addr+text.Size; pc += 997 {
			pcs = append(pcs, pc)
		}
		pcs = append(pcs, main.Entry, main.Entry+4, 1)
		before := make([]string, len(pcs))
		for i, pc := range pcs {
			before[i] = strings.Join(b.SymbolizeFrames(pc), " | ")
		}

		b.Release()
		if p.funcs.data.mem != nil || p.funcs.index != nil || b.symtab != nil || b.dwarf != nil {
			t.Fatalf("Release kept the table (%v), its index (%v), the symbols (%v) or DWARF (%v) in memory",
				p.funcs.data.mem != nil, p.funcs.index != nil, b.symtab != nil, b.dwarf != nil)
		}
		for i, pc := range pcs {
			if got := strings.Join(b.SymbolizeFrames(pc), " | "); got != before[i] {
				t.Fatalf("after Release, %#x symbolizes as %q, before as %q", pc, got, before[i])
			}
		}
		if p.funcs.data.mem != nil {
			t.Error("symbolizing read the whole table back into memory")
		}
		if n := len(p.funcs.data.pages); n == 0 || n > pclnPages {
			t.Errorf("%d pages cached, want 1..%d", n, pclnPages)
		}

		again, err := b.Func("main.main")
		if err != nil || again != main {
			t.Fatalf("Func after Release = %+v, %v; before %+v", again, err, main)
		}
		if _, err := b.Func("main.noSuchFunction"); err == nil {
			t.Error("found a function that does not exist")
		}
		b.Release()
		if p.funcs.data.mem != nil {
			t.Error("second Release kept the table")
		}
	})
}

// TestPclnDataPages: reads across page boundaries, at the end and past it
// give the resident table's bytes or fail, never more.
func TestPclnDataPages(t *testing.T) {
	mem := make([]byte, 3*pclnPageSize+100)
	for i := range mem {
		mem[i] = byte(i%255) + 1
	}
	mem[pclnPageSize+5] = 0
	d := newPclnData(append([]byte(nil), mem...), strings.NewReader(string(mem)), 0)
	d.release()
	for _, c := range []struct{ off, n uint64 }{{0, 4}, {pclnPageSize - 2, 4}, {uint64(len(mem)) - 4, 4}, {2*pclnPageSize - 1, pclnPageSize}, {uint64(len(mem)), 0}} {
		got, ok := d.at(c.off, c.n)
		if !ok || string(got) != string(mem[c.off:c.off+c.n]) {
			t.Errorf("at(%d, %d) = %v, %v", c.off, c.n, ok, len(got))
		}
	}
	if _, ok := d.at(uint64(len(mem))-3, 4); ok {
		t.Error("read past the end")
	}
	if s, ok := d.cstring(pclnPageSize - 3); !ok || s != string(mem[pclnPageSize-3:pclnPageSize+5]) {
		t.Errorf("cstring across a page = %q, %v", s, ok)
	}
	for i := 0; i < 3*pclnPages; i++ {
		d.at(uint64(i%4)*pclnPageSize, 1)
		d.at(uint64(i)%uint64(len(mem)), 1)
	}
	if len(d.pages) > pclnPages || len(d.fifo) != len(d.pages) {
		t.Errorf("%d pages cached (%d in order), at most %d", len(d.pages), len(d.fifo), pclnPages)
	}
}
