package event

import (
	"net/netip"
	"testing"
)

func TestTCPActivityConverts(t *testing.T) {
	ap := netip.MustParseAddrPort
	e := TCP{Kind: TCPActivity, Mono: 7, PID: 3, Cookie: 9, Local: ap("10.0.0.1:5"), Peer: ap("10.0.0.2:80"), Goid: 41, Sent: true}
	a, ok := e.Activity()
	want := SockActivity{Mono: 7, PID: 3, Cookie: 9, Local: e.Local, Peer: e.Peer, Goid: 41, Sent: true}
	if !ok || a != want {
		t.Fatalf("Activity() = %+v, %v; want %+v", a, ok, want)
	}
	e.Sent = false
	if a, _ := e.Activity(); a.Sent || !a.Received {
		t.Errorf("a receive converted to %+v", a)
	}
	e.Kind = TCPRTO
	if _, ok := e.Activity(); ok {
		t.Error("an rto event converted to activity")
	}
}

func TestAnyCarriesMonoTime(t *testing.T) {
	for _, ev := range []Any{&TCP{Mono: 1}, &Deadline{Mono: 2}, &SockActivity{Mono: 3}, &Binding{Mono: 4}} {
		switch e := ev.(type) {
		case *TCP:
			if e.MonoTime() != 1 {
				t.Error("TCP")
			}
		case *Deadline:
			if e.MonoTime() != 2 {
				t.Error("Deadline")
			}
		case *SockActivity:
			if e.MonoTime() != 3 {
				t.Error("SockActivity")
			}
		case *Binding:
			if e.MonoTime() != 4 {
				t.Error("Binding")
			}
		}
	}
}

func TestRequestLevelBindings(t *testing.T) {
	for src, want := range map[string]bool{BindKernelG: false, BindHTTPRoundTrip: true, BindGRPCStream: true, BindDial: true, "": false} {
		if got := (&Binding{Source: src}).RequestLevel(); got != want {
			t.Errorf("%q: RequestLevel() = %v", src, got)
		}
	}
}
