package main

import (
	"strings"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/lab/netlab"
)

// networkClasses are the causes that blame the network.
var networkClasses = map[string]bool{"rto": true, "syn_timeout": true, "reset": true, "refused": true,
	"zero_window": true, "fast_retransmit": true, "tlp": true}

// TestCauseRTOMidRequest: requests on a keep-alive connection, then a
// blackhole: the first timeout after it is blamed on RTOs of that
// connection; the later ones (new connections whose SYNs vanish) on the
// handshake; none on a slow peer or the process.
func TestCauseRTOMidRequest(t *testing.T) {
	requireGoTracing(t)
	server := []string{"http-server", "-addr", ":8080", "-delay", "50ms"}
	client := []string{"client", "-proto", "http", "-target", labTarget, "-n", "14", "-concurrency", "1", "-timeout", "1200ms", "-span", "before"}
	run := runLab(t, server, client, false, func(p *netlab.Pair) {
		time.Sleep(500 * time.Millisecond) // a few requests on the kept-alive connection
		if err := p.Blackhole(8080); err != nil {
			t.Error(err)
		}
	}, "--detail", "always")
	if len(run.reports) == 0 {
		t.Fatalf("no timeout reported: %s", run.stderr)
	}
	first := run.reports[0]
	if first.Cause == nil || (first.Cause.Class != "rto" && first.Cause.Class != "tlp") {
		t.Fatalf("first timeout after the blackhole: cause %+v, want rto", first.Cause)
	}
	// The detail tier bound the request to its connection (net/http round
	// trip): exact, not inferred.
	if first.Cause.Confidence != "exact" {
		t.Errorf("first timeout: confidence %s, want exact (note: %s)", first.Cause.Confidence, first.Cause.Note)
	}
	if !strings.Contains(first.Cause.Summary, "RTO") && !strings.Contains(first.Cause.Summary, "probe") {
		t.Errorf("summary %q does not mention the RTOs", first.Cause.Summary)
	}
	// Later requests find the old connection still retransmitting its FIN
	// next to new ones whose SYNs vanish: without a binding of the request
	// to its connection the candidates disagree, and unknown (ambiguous) is
	// the honest verdict. Blaming the peer or the process never is.
	for _, r := range run.reports {
		if r.Cause == nil {
			t.Fatalf("report without a cause: %+v", r)
		}
		if c := string(r.Cause.Class); c == "slow_peer" || c == "local" {
			t.Errorf("timeout under a blackhole blamed on %s: %+v", c, r.Cause)
		}
		if !networkClasses[string(r.Cause.Class)] && r.Cause.Confidence != "ambiguous" {
			t.Errorf("non-network class %s without ambiguity: %+v", r.Cause.Class, r.Cause)
		}
	}
}

// TestCauseSlowPeer: a healthy network and a server slower than the
// deadline: slow_peer, never a network cause.
func TestCauseSlowPeer(t *testing.T) {
	requireGoTracing(t)
	server := []string{"http-server", "-addr", ":8080", "-delay", "400ms"}
	client := []string{"client", "-proto", "http", "-target", labTarget, "-n", "6", "-concurrency", "1", "-timeout", "150ms", "-span", "before"}
	run := runLab(t, server, client, false, nil, "--detail", "always")
	if len(run.reports) != 6 {
		t.Fatalf("want 6 reports, got %d", len(run.reports))
	}
	for _, r := range run.reports {
		if r.Cause == nil || r.Cause.Class != "slow_peer" {
			t.Errorf("cause %+v, want slow_peer", r.Cause)
		}
	}
}
