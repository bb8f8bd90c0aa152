package gobin

import (
	"errors"
	"strings"
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

// TestArgLive reads the liveness of a register argument past the first,
// through the argument layout, against what the runtime's own traceback
// prints for these frames (a "?" after a word not live): at net/http's
// call of send, (*Client).send's receiver and request are live (the
// expiry probe reads both for Client.Timeout); at send's call of the
// transport's RoundTrip, its request (offset 0) and transport (8, 16) are
// live and its deadline's words (24, 32) are not: the compiler keeps the
// deadline elsewhere.
func TestArgLive(t *testing.T) {
	for _, tc := range []struct{ name, goarch string }{{"plain", "amd64"}, {"arm64", "arm64"}} {
		t.Run(tc.name, func(t *testing.T) {
			b := buildLabapp(t, tc.name, tc.goarch)
			calls := func(caller, callee string) []uint64 {
				t.Helper()
				from, err1 := b.Func(caller)
				to, err2 := b.Func(callee)
				if err := errors.Join(err1, err2); err != nil {
					t.Fatal(err)
				}
				pcs, err := b.CallSites(from, to)
				if err != nil || len(pcs) == 0 {
					t.Fatalf("calls of %s in %s: %v, %v", callee, caller, pcs, err)
				}
				return pcs
			}
			for _, pc := range calls("net/http.(*Client).send", "net/http.send") {
				for _, off := range []uint64{0, 8} {
					if err := b.ArgLive(pc, off); err != nil {
						t.Errorf("(*Client).send at %#x, argument word %d: %v", pc, off, err)
					}
				}
			}
			send, err := b.Func("net/http.send")
			if err != nil {
				t.Fatal(err)
			}
			insts, err := b.disassemble(send)
			if err != nil {
				t.Fatal(err)
			}
			// send calls the RoundTripper through its interface, then
			// stopTimer, a closure: the dynamic calls of its own.
			dyn := 0
			for _, in := range insts {
				if in.kind != kindCall || in.target != 0 {
					continue
				}
				// Not an inlined callee's call (a request's closeBody,
				// before send has spilled anything).
				if !strings.HasPrefix(b.Symbolize(in.pc), "net/http.send ") {
					continue
				}
				dyn++
				for _, off := range []uint64{0, 8, 16} {
					if err := b.ArgLive(in.pc, off); err != nil {
						t.Errorf("send at %#x, argument word %d: %v", in.pc, off, err)
					}
				}
				for _, off := range []uint64{24, 32} {
					if err := b.ArgLive(in.pc, off); !errors.Is(err, ErrNotLive) {
						t.Errorf("send at %#x, argument word %d: %v, want not live", in.pc, off, err)
					}
				}
			}
			if dyn == 0 {
				t.Fatal("no dynamic call in net/http.send")
			}
			if err := b.ArgLive(calls("net/http.(*Client).send", "net/http.send")[0], 48); err == nil {
				t.Error("(*Client).send has no argument word at offset 48: no error")
			}
		})
	}
}
