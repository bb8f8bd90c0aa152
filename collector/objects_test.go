package collector

import (
	"testing"

	"github.com/cilium/ebpf"
)

// Replacements finds the maps by their bpf2go tags, through embedded
// structs, and keeps only those the spec declares and that are loaded.
func TestReplacements(t *testing.T) {
	a, b, d := new(ebpf.Map), new(ebpf.Map), new(ebpf.Map)
	type inner struct {
		D *ebpf.Map `ebpf:"d"`
	}
	objs := struct {
		inner
		A *ebpf.Map     `ebpf:"a"`
		B *ebpf.Map     `ebpf:"b"`
		C *ebpf.Map     `ebpf:"c"`
		P *ebpf.Program `ebpf:"a_prog"`
	}{inner: inner{D: d}, A: a, B: b}
	spec := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{"a": {}, "c": {}, "d": {}}}
	got := Replacements(spec, &objs)
	if len(got) != 2 || got["a"] != a || got["d"] != d {
		t.Fatalf("got %v, want a and d only (b is not in the spec, c is not loaded)", got)
	}
}
