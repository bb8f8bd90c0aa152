package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/lab/netlab"
)

// TestCauseProxyUpstream: a proxy-like server (labapp http-server
// -upstream) whose handler sets its own 300 ms deadline over a GET to its
// upstream, traced as the server. The upstream answers after 2 s, then
// every segment to it after the handshake is dropped. Every report names
// the upstream first (the outbound connection the handler waited on,
// never the caller's inbound one): slow_peer while it was slow, rto once
// its requests were lost; never slow_client. With the detail tier off
// (bound at the expiry) and on.
func TestCauseProxyUpstream(t *testing.T) {
	requireGoTracing(t)
	const deadline = 300 * time.Millisecond
	for _, detail := range []string{"never", "always"} {
		t.Run("detail_"+detail, func(t *testing.T) {
			// The first server is the one traced: the proxy on :8080, its
			// upstream on :8081 in the same namespace (over loopback, which
			// the fault's INPUT rule sees too).
			servers := []string{"http-server", "-addr", ":8080", "-upstream", "http://127.0.0.1:8081/work", "-deadline", deadline.String(),
				"--", "http-server", "-addr", "127.0.0.1:8081", "-delay", "2s"}
			client := []string{"client", "-proto", "http", "-target", labTarget, "-n", "24", "-concurrency", "2", "-timeout", "2s", "-span", "before"}
			var faultAt time.Time
			run := runLab(t, servers, client, true, func(p *netlab.Pair) {
				time.Sleep(1500 * time.Millisecond) // slow: ~10 expiries
				faultAt = time.Now()
				if err := p.LossAfterHandshake(8081, 1); err != nil {
					t.Error(err)
				}
			}, "--detail", detail)
			var slow, rto int
			tlpOnly := 0
			for _, r := range run.reports {
				if r.Cause == nil || len(r.Cause.Connections) == 0 {
					t.Errorf("report without a connection: %s", jsonOf(r))
					continue
				}
				first := r.Cause.Connections[0]
				if first.Peer.Port() != 8081 || first.Direction != "outbound" {
					t.Errorf("first connection %v (%s), want the upstream :8081, outbound: %s/%s %s (note: %s)",
						first.Peer, first.Direction, r.Cause.Class, r.Cause.Confidence, r.Cause.Summary, r.Cause.Note)
				}
				dl, err := time.Parse(time.RFC3339Nano, r.Deadline)
				if err != nil {
					t.Fatalf("deadline %q: %v", r.Deadline, err)
				}
				class := string(r.Cause.Class)
				switch {
				case class == "slow_client":
					t.Errorf("the caller blamed: %s", summaryOf(r))
				case dl.Before(faultAt):
					if class != "slow_peer" {
						t.Errorf("slow upstream, expiry %v before the fault: %s", dl.Format(time.StampMilli), summaryOf(r))
					}
					slow++
				case dl.After(faultAt.Add(deadline + 50*time.Millisecond)):
					// Created after the fault: its request to the upstream was lost.
					// A request on a connection dialed after the fault may
					// see only a tail loss probe within its 300 ms (the RTO
					// comes after it): no verdict (unknown), which is not a
					// wrong one; at most two such (CI, December 6: 1 of 24).
					if class == "unknown" && strings.Contains(r.Cause.Note, "showed only a tail loss probe") && tlpOnly < 2 {
						tlpOnly++
						t.Logf("after the fault, only a tail loss probe on the upstream connection: %s", summaryOf(r))
						continue
					}
					if class != "rto" {
						t.Errorf("upstream dropping, expiry %v after the fault at %v: %s", dl.Format(time.StampMilli), faultAt.Format(time.StampMilli), summaryOf(r))
					}
					rto++
				}
			}
			t.Logf("%d reports: %d slow_peer before the fault, %d rto after it", len(run.reports), slow, rto)
			if slow < 4 || rto < 4 {
				t.Errorf("want at least 4 of each phase\n%s", run.stderr)
			}
		})
	}
}

func summaryOf(r export.TimeoutJSON) string {
	return fmt.Sprintf("%s/%s: %s (note: %s)", r.Cause.Class, r.Cause.Confidence, r.Cause.Summary, r.Cause.Note)
}
