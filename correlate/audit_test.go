package correlate

import (
	"net/netip"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

const ms = uint64(time.Millisecond)

var auditBase = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func call(mono uint64, goid, cookie uint64, deadline bool) *event.Call {
	return &event.Call{Mono: mono, Time: auditBase.Add(time.Duration(mono)), PID: 7, Goid: goid, Cookie: cookie, Kind: "http", HasDeadline: deadline, Caller: "main.get (/src/main.go:9)"}
}

func tcpOn(mono, cookie uint64, kind event.TCPKind) *event.TCP {
	return &event.TCP{Mono: mono, PID: 7, Cookie: cookie, Kind: kind, Peer: netip.MustParseAddrPort("10.213.0.2:8080"), State: event.TCPState(1)}
}

// A call without a deadline whose connection the kernel has named is said
// at once; one whose peer is not known yet waits for it, at most PeerWait,
// and the calls after it wait in order.
func TestAuditMissingWaitsForThePeer(t *testing.T) {
	a := NewAudit(AuditConfig{Missing: true})
	if out := a.Push(tcpOn(1*ms, 10, event.TCPRTO)); len(out) != 0 {
		t.Fatalf("a kernel event made lines: %+v", out)
	}
	if out := a.Push(call(2*ms, 1, 10, false)); len(out) != 1 || out[0].Kind != AuditMissing || out[0].Peer != "10.213.0.2:8080" {
		t.Fatalf("known peer: got %+v", out)
	}
	if out := a.Push(call(3*ms, 2, 11, false)); len(out) != 0 {
		t.Fatalf("unknown peer said at once: %+v", out)
	}
	if out := a.Push(call(4*ms, 3, 10, false)); len(out) != 0 {
		t.Fatalf("a later call overtook the one waiting: %+v", out)
	}
	if out := a.Push(call(5*ms, 4, 12, true)); len(out) != 0 {
		t.Fatalf("a call with a deadline made a line: %+v", out)
	}
	out := a.Push(tcpOn(50*ms, 11, event.TCPRTO)) // the peer is named
	if len(out) != 2 || out[0].Call.Goid != 2 || out[0].Peer != "10.213.0.2:8080" || out[1].Call.Goid != 3 {
		t.Fatalf("after the peer: got %+v", out)
	}
	a.Push(call(60*ms, 5, 13, false))
	if out := a.Advance(60*ms + 299*ms); len(out) != 0 {
		t.Fatalf("said before PeerWait: %+v", out)
	}
	if out := a.Advance(60*ms + 300*ms); len(out) != 1 || out[0].Peer != "" {
		t.Fatalf("after PeerWait: got %+v", out)
	}
	if s := a.Stats(); s.Calls != 5 || s.Missing != 4 {
		t.Errorf("stats %+v", s)
	}
}

// A call without a deadline still waiting HangAfter in event time is said
// once, with its connection's last kernel event and the time it became
// hung; one that ended is not; lines come in the order the calls started.
func TestAuditHungInEventTime(t *testing.T) {
	a := NewAudit(AuditConfig{Hung: true, HangAfter: time.Second})
	a.Push(call(10*ms, 2, 20, false))
	a.Push(call(5*ms+10*ms, 1, 21, false))
	a.Push(tcpOn(100*ms, 20, event.TCPRTO))
	a.Push(call(200*ms, 3, 22, false))
	a.Push(&event.Call{Mono: 300 * ms, PID: 7, Goid: 3, Kind: "http", End: true})
	a.Push(call(400*ms, 4, 23, true))
	if out := a.Advance(1009 * ms); len(out) != 0 {
		t.Fatalf("hung before HangAfter: %+v", out)
	}
	out := a.Advance(2000 * ms)
	if len(out) != 2 || out[0].Call.Goid != 2 || out[1].Call.Goid != 1 {
		t.Fatalf("got %+v", out)
	}
	if out[0].Conn == nil || out[0].Conn.Kind != event.TCPRTO || out[1].Conn != nil {
		t.Errorf("connections: %+v / %+v", out[0].Conn, out[1].Conn)
	}
	if out[0].Waiting != time.Second || !out[0].Time().Equal(auditBase.Add(10*time.Millisecond+time.Second)) {
		t.Errorf("waiting %v at %v", out[0].Waiting, out[0].Time())
	}
	if out := a.Advance(9000 * ms); len(out) != 0 {
		t.Errorf("said twice: %+v", out)
	}
}

// The same stream cut into different Push/Advance calls gives the same
// lines in the same order: the audit depends on event time only.
func TestAuditIndependentOfHowTheStreamIsCut(t *testing.T) {
	stream := []event.Any{call(1*ms, 1, 30, false), call(2*ms, 2, 31, false), tcpOn(3*ms, 30, event.TCPRTO),
		call(500*ms, 3, 32, false), tcpOn(1500*ms, 31, event.TCPRTO), call(2600*ms, 4, 30, false), &event.Mark{Mono: 5000 * ms}}
	run := func(advanceEvery uint64) []AuditLine {
		a := NewAudit(AuditConfig{Missing: true, Hung: true, HangAfter: time.Second})
		var got []AuditLine
		var last uint64
		for _, ev := range stream {
			if advanceEvery > 0 {
				for t := last + advanceEvery; t < ev.MonoTime(); t += advanceEvery {
					got = append(got, a.Advance(t)...)
				}
			}
			got = append(got, a.Push(ev)...)
			last = ev.MonoTime()
		}
		return append(got, a.Flush()...)
	}
	want := run(0)
	if len(want) != 8 { // 4 calls without a deadline, each missing and then hung
		t.Fatalf("%d lines: %+v", len(want), want)
	}
	for _, every := range []uint64{7 * ms, 50 * ms, 333 * ms} {
		got := run(every)
		if len(got) != len(want) {
			t.Fatalf("advance every %v: %d lines, want %d", time.Duration(every), len(got), len(want))
		}
		for i := range got {
			if got[i].Kind != want[i].Kind || got[i].Call.Goid != want[i].Call.Goid || got[i].Peer != want[i].Peer {
				t.Errorf("advance every %v: line %d = %+v, want %+v", time.Duration(every), i, got[i], want[i])
			}
		}
	}
}
