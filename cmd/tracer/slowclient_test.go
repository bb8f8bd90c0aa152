package main

import (
	"testing"
)

// TestCauseHTTPSlowClient: a net/http server whose handler reads the
// request body under its own 300 ms deadline (labapp -deadline-body), and
// clients whose uploads stop halfway for a second (-body-stall): each
// handler's deadline expires while it waits for the rest of the body. The
// connection is healthy and the client, not an answer, is late: every
// report of the server is slow_client, naming the inbound connection. With
// the detail tier off and on.
func TestCauseHTTPSlowClient(t *testing.T) {
	requireGoTracing(t)
	for _, detail := range []string{"never", "always"} {
		t.Run("detail_"+detail, func(t *testing.T) {
			server := []string{"http-server", "-addr", ":8080", "-deadline", "300ms", "-deadline-body"}
			client := []string{"client", "-proto", "http", "-target", labTarget, "-n", "8", "-concurrency", "2", "-timeout", "3s", "-span", "before",
				"-req-bytes", "400000", "-body-stall", "1s"}
			run := runLab(t, server, client, true, nil, "--detail", detail)
			expired := 0
			for _, l := range run.server {
				if l.Outcome == "deadline_exceeded" {
					expired++
				}
			}
			if expired < 6 {
				t.Fatalf("%d of 8 handlers' deadlines expired, want most: %s", expired, run.stderr)
			}
			slow := 0
			for _, r := range run.reports {
				if r.Cause == nil || len(r.Cause.Connections) == 0 {
					t.Errorf("report without a connection: %s", jsonOf(r))
					continue
				}
				first := r.Cause.Connections[0]
				if r.Cause.Class != "slow_client" || first.Peer.Port() == 8080 || first.Direction == "outbound" {
					t.Errorf("%s; first connection %v (%s), want slow_client naming the client's inbound connection", summaryOf(r), first.Peer, first.Direction)
					continue
				}
				slow++
			}
			t.Logf("%d handlers' deadlines expired, %d reports, %d slow_client", expired, len(run.reports), slow)
			if len(run.reports) < expired {
				t.Errorf("%d reports for %d expiries", len(run.reports), expired)
			}
		})
	}
}
