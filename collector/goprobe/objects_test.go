package goprobe

import (
	"reflect"
	"testing"

	"github.com/cilium/ebpf"
)

// The three objects share their common maps: one kernel map each, not a
// copy per object (a copy would leave, say, the call probes reading a
// go_procs nobody fills, and binding nothing).
func TestObjectsShareTheirMaps(t *testing.T) {
	requireTracing(t)
	n, err := NewNode(NodeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ids := func(maps any) map[string]ebpf.MapID {
		out := map[string]ebpf.MapID{}
		v := reflect.ValueOf(maps).Elem()
		for i := range v.NumField() {
			m := v.Field(i).Interface().(*ebpf.Map)
			info, err := m.Info()
			if err != nil {
				t.Fatal(err)
			}
			id, _ := info.ID()
			out[v.Type().Field(i).Tag.Get("ebpf")] = id
		}
		return out
	}
	made := ids(&n.objs.godeadlineMaps)
	shared := 0
	for obj, maps := range map[string]any{"gocalls": &n.objs.calls.gocallsMaps, "gotraceparent": &n.objs.traceparent.gotraceparentMaps} {
		for name, id := range ids(maps) {
			if want, ok := made[name]; ok {
				shared++
				if id != want {
					t.Errorf("%s's %s is map %d, godeadline's is %d: not shared", obj, name, id, want)
				}
			}
		}
	}
	if shared < 8 {
		t.Errorf("only %d shared maps checked", shared)
	}
}

// TestVerifierWork bounds the instructions the kernel's verifier processes
// for each Go program (the object loaded as a node loads it): the limit is
// a million per program, and arm64's build of the same source costs well
// over twice amd64's (session 19: go_timer_fired at 378k here was rejected
// on arm64, "BPF program is too large", before read_stack became a global
// function; 58k after). A quarter of the limit here keeps arm64, and older
// kernels, clear of it; make kmatrix checks them for real.
func TestVerifierWork(t *testing.T) {
	requireTracing(t)
	n, err := NewNode(NodeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	const budget = 250_000
	for _, p := range n.objs.programs() {
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		insns, ok := info.VerifiedInstructions()
		if !ok {
			t.Skip("this kernel does not report verified instructions")
		}
		if insns > budget {
			t.Errorf("%s: the verifier processed %d instructions, more than %d (a quarter of its limit)", info.Name, insns, budget)
		}
		t.Logf("%s: %d", info.Name, insns)
	}
}
