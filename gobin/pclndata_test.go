package gobin

import (
	"bytes"
	"testing"
)

// A read across a page boundary of a released table, when the first page
// is the oldest of a full cache: reading the second page evicts the first
// and reuses its buffer. The bytes returned are the table's all the same.
func TestPclnDataAcrossPagesWithFullCache(t *testing.T) {
	table := make([]byte, (pclnPages+8)*pclnPageSize)
	for i := range table {
		table[i] = byte(i % 251)
	}
	d := newPclnFile(bytes.NewReader(table), 0, uint64(len(table)))
	if _, ok := d.at(0, 1); !ok { // page 0: the oldest
		t.Fatal("read page 0")
	}
	for p := uint64(2); p <= pclnPages; p++ { // pages 2..32: the cache is full
		if _, ok := d.at(p*pclnPageSize, 1); !ok {
			t.Fatalf("read page %d", p)
		}
	}
	off, n := uint64(pclnPageSize-20), uint64(44) // across pages 0 and 1
	got, ok := d.at(off, n)
	if !ok {
		t.Fatal("read across pages 0 and 1")
	}
	if want := table[off : off+n]; !bytes.Equal(got, want) {
		t.Errorf("across the boundary: got %v, want %v", got, want)
	}
	// And the pages stay right afterwards.
	for _, off := range []uint64{0, pclnPageSize, 5 * pclnPageSize, uint64(len(table)) - 8} {
		if got, ok := d.at(off, 8); !ok || !bytes.Equal(got, table[off:off+8]) {
			t.Errorf("at %#x: got %v, %v", off, got, ok)
		}
	}
}
