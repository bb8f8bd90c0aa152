package enrich

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/lab/netlab"
)

// startEnrich starts the optional enrichment or skips, with the kernel's
// reason, where neither fentry nor kprobes work (the development
// machines); any other failure fails.
func startEnrich(t *testing.T, forceKprobe bool) *Collector {
	t.Helper()
	requireTracing(t)
	e, err := Start(Config{ForceKprobe: forceKprobe, PollInterval: 20 * time.Millisecond})
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("enrichment not available here (optional): %v", err)
	}
	if err != nil {
		t.Fatalf("start enrichment: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close enrichment: %v", err)
		}
	})
	return e
}

// A connection blackholed after the handshake sends a tail loss probe
// first: the enrichment reports it on that connection's 4-tuple, by
// fentry (with the socket cookie) and by kprobe.
func TestEnrichLossProbe(t *testing.T) {
	for _, forceKprobe := range []bool{false, true} {
		name := map[bool]string{false: "preferred", true: "kprobe"}[forceKprobe]
		t.Run(name, func(t *testing.T) {
			e := startEnrich(t, forceKprobe)
			p := netlab.NewPair(t)
			srv := serve(t, p, p.ServerAddr)
			conn, err := p.Dial(context.Background(), "tcp", srv.String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			roundTrip(t, conn)
			if err := p.Blackhole(labPort); err != nil {
				t.Fatal(err)
			}
			conn.Write([]byte("lost"))
			local := addrPort(t, conn.LocalAddr())
			timeout := time.After(8 * time.Second)
			for {
				select {
				case ev := <-e.Events():
					if ev.Local != local || ev.Peer != srv {
						continue
					}
					if ev.Kind != event.TCPTLP || (e.Via() == "fentry") != (ev.Cookie != 0) {
						t.Fatalf("via %s: %+v", e.Via(), ev)
					}
					s, err := e.Stats()
					if err != nil || s.Hits == 0 || s.Emitted == 0 {
						t.Fatalf("stats %+v, %v", s, err)
					}
					t.Logf("loss probe via %s: %+v", e.Via(), ev)
					return
				case <-timeout:
					t.Fatalf("no loss probe seen on %s -> %s (via %s)", local, srv, e.Via())
				}
			}
		})
	}
}
