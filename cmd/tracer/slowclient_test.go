package main

import (
	"strings"
	"testing"
)

// TestCauseHTTPSlowClient: a net/http server whose handler reads the
// request body under its own 300 ms deadline (labapp -deadline-body), and
// clients whose uploads stop halfway for a second (-body-stall): each
// handler's deadline expires while it waits for the rest of the body. The
// connection is healthy and the client, not an answer, is late.
//
// With the detail tier on, the expiry probe reads the goroutine that set
// the deadline, parked in net/http's connReader.Read on the inbound
// connection: every report is slow_client, exact, naming it. With it off,
// nothing says where the handler was (reading, or waiting on a lock): the
// report must not blame the caller ("did not answer"), it says unknown and
// why. With auto, the first expiries are cold and the rest exact.
func TestCauseHTTPSlowClient(t *testing.T) {
	requireGoTracing(t)
	for _, detail := range []string{"never", "always", "auto"} {
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
			slow, cold := 0, 0
			for _, r := range run.reports {
				if r.Cause == nil {
					t.Errorf("report without a cause: %s", jsonOf(r))
					continue
				}
				if r.Cause.Class == "unknown" && detail != "always" && strings.Contains(r.Cause.Summary, "waited on no outbound connection") {
					cold++
					continue
				}
				if len(r.Cause.Connections) == 0 {
					t.Errorf("report without a connection: %s", jsonOf(r))
					continue
				}
				first := r.Cause.Connections[0]
				if r.Cause.Class != "slow_client" || r.Cause.Confidence != "exact" || first.Peer.Port() == 8080 || first.Direction != "inbound" {
					t.Errorf("%s; first connection %v (%s), want slow_client, exact, naming the client's inbound connection", summaryOf(r), first.Peer, first.Direction)
					continue
				}
				slow++
			}
			t.Logf("%d handlers' deadlines expired, %d reports, %d slow_client, %d unknown (detail tier off at the expiry)", expired, len(run.reports), slow, cold)
			if len(run.reports) < expired {
				t.Errorf("%d reports for %d expiries", len(run.reports), expired)
			}
			if detail == "auto" && slow == 0 {
				t.Errorf("no slow_client with --detail auto: the detail tier did not come on after the first expiries")
			}
		})
	}
}
