package gobin

import (
	"errors"
	"testing"
)

// TestFirstArgLive reads the compiler's liveness of register arguments'
// spill slots in the lab application, amd64 and arm64: at each call a
// waiting frame parks in (net/http's round trip and gRPC's waitOnHeader,
// in runtime.selectgo), the receiver is live, as the expiry probe's binding
// needs. The same table says "not live" at some calls of net/http's
// functions, where a slot may hold an earlier call's value: the check can
// refuse.
func TestFirstArgLive(t *testing.T) {
	for _, tc := range []struct{ name, goarch string }{{"plain", "amd64"}, {"arm64", "arm64"}} {
		t.Run(tc.name, func(t *testing.T) {
			b := buildLabapp(t, tc.name, tc.goarch)
			sel, err := b.Func("runtime.selectgo")
			if err != nil {
				t.Fatal(err)
			}
			w, err := b.GRPCClientWait()
			if err != nil {
				t.Fatalf("GRPCClientWait: %v", err)
			}
			for _, name := range []string{"net/http.(*persistConn).roundTrip", w.WaitOnHeader.Name} {
				fn, err := b.Func(name)
				if err != nil {
					t.Fatal(err)
				}
				calls, err := b.CallSites(fn, sel)
				if err != nil || len(calls) == 0 {
					t.Fatalf("%s: calls of selectgo %v, %v", name, calls, err)
				}
				for _, pc := range calls {
					if err := b.FirstArgLive(pc); err != nil {
						t.Errorf("%s at %#x: %v", name, pc, err)
					}
				}
			}
			fns, err := b.Funcs("net/http.")
			if err != nil {
				t.Fatal(err)
			}
			refused, checked := 0, 0
			for _, fn := range fns {
				insts, err := b.disassemble(fn)
				if err != nil {
					continue
				}
				for _, in := range insts {
					if in.kind != kindCall {
						continue
					}
					checked++
					if err := b.FirstArgLive(in.pc); errors.Is(err, ErrNotLive) {
						refused++
					} else if err != nil {
						t.Fatalf("%s at %#x: %v", fn.Name, in.pc, err)
					}
				}
			}
			if refused == 0 {
				t.Errorf("no call of %d in net/http with its first argument's slot not live", checked)
			}
			t.Logf("net/http: the first argument's spill slot is not live at %d of %d calls", refused, checked)
		})
	}
}
