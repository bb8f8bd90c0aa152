package main

import (
	"strings"
	"testing"

	"github.com/timeout-tracer/tracer/export"
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
			run, expired := stalledUploads(t, detail, nil, "-deadline", "300ms", "-deadline-body")
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
				if !slowClientExact(t, r) {
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

// TestCauseHTTPSlowClientTimeoutHandler: the handler's deadline is
// http.TimeoutHandler's, which waits on it on the connection's serving
// goroutine while the handler, on a goroutine of its own, reads the
// stalled upload. With no detail probe (--detail never), the expiry probe
// reads the ResponseWriter from TimeoutHandler's frame (its second
// argument: net/http's *response, its conn, the inbound connection), then
// the goroutine parked reading that connection: the handler, in
// net/http's body read. Every report is slow_client/exact naming the
// client's inbound connection (before: unknown, "waited on no outbound
// connection"), with TimeoutHandler's duration as its budget.
func TestCauseHTTPSlowClientTimeoutHandler(t *testing.T) {
	requireGoTracing(t)
	for _, detail := range []string{"never", "always"} {
		t.Run("detail_"+detail, func(t *testing.T) {
			run, expired := stalledUploads(t, detail, nil, "-timeout-handler", "300ms")
			allSlowClients(t, run, expired, func(r export.TimeoutJSON) {
				// Its budget, TimeoutHandler's duration, read at the
				// expiry from its ServeHTTP frame (or the creation, seen
				// by the detail tier).
				wantFrom := map[string]string{"never": "timeout_handler", "always": "creation"}[detail]
				if r.BudgetMs == nil || *r.BudgetMs < 299 || *r.BudgetMs > 301 || r.BudgetFrom != wantFrom {
					t.Errorf("budget_ms %s from %q, want 300 from %s", jsonOf(r.BudgetMs), r.BudgetFrom, wantFrom)
				}
			})
		})
	}
}

// TestCauseHTTPSlowClientTLS: TestCauseHTTPSlowClient's stalled uploads
// over TLS, to net/http's HTTP/2 server (HTTPS's default by ALPN) and to
// its HTTP/1.1 one. With the detail tier on, the handler that set the
// deadline is parked in the HTTP/2 server's request body read (its pipe,
// fed by the connection's serve loop: no socket read of its own), or, over
// HTTP/1.1, in crypto/tls's read under net/http's connReader, 14 frames
// above gopark (deep_frame); each binds the inbound connection through the
// TLS connection to its socket: every report slow_client, exact, naming
// it. So does http.TimeoutHandler's, with no detail tier: over HTTP/1.1
// the goroutine parked reading its inbound connection, over HTTP/2 the one
// waiting on the request's body pipe (found from its ResponseWriter).
// Before: HTTP/2 8 of 8 unknown; HTTP/1.1 8 of 8 slow_peer "the client did
// not answer" (then unknown, with callersOnly).
func TestCauseHTTPSlowClientTLS(t *testing.T) {
	requireGoTracing(t)
	handler := []string{"-tls", "-deadline", "300ms", "-deadline-body"}
	for _, mode := range []struct {
		name, detail   string
		client, server []string
	}{
		{"h2", "always", []string{"-tls"}, handler},
		{"http1", "always", []string{"-tls", "-http1"}, handler},
		// http.TimeoutHandler's reader, found from its inbound
		// connection with no detail tier, parked as deep.
		{"http1_timeout_handler", "never", []string{"-tls", "-http1"}, []string{"-tls", "-timeout-handler", "300ms"}},
		// Over HTTP/2: the goroutine waiting on the request's body
		// pipe, found from TimeoutHandler's ResponseWriter.
		{"h2_timeout_handler", "never", []string{"-tls"}, []string{"-tls", "-timeout-handler", "300ms"}},
		// Under third-party middleware that wraps the ResponseWriter
		// TimeoutHandler gets (otelhttp's httpsnoop wrapper outside
		// Prometheus' delegator): looked through to net/http's own.
		{"http1_timeout_handler_wrapped", "never", []string{"-tls", "-http1"},
			[]string{"-tls", "-timeout-handler", "300ms", "-outer-middleware", "both"}},
		{"h2_timeout_handler_wrapped", "never", []string{"-tls"},
			[]string{"-tls", "-timeout-handler", "300ms", "-outer-middleware", "both"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			run, expired := stalledUploads(t, mode.detail, mode.client, mode.server...)
			allSlowClients(t, run, expired, nil)
		})
	}
}

// stalledUploads runs labapp's HTTP server, traced with --detail detail,
// with serverArgs, and eight clients (with clientArgs) whose uploads stop
// halfway for a second; it returns the run and how many handlers'
// deadlines expired by the server's own log (most, or the test fails).
func stalledUploads(t *testing.T, detail string, clientArgs []string, serverArgs ...string) (labRun, int) {
	t.Helper()
	server := append([]string{"http-server", "-addr", ":8080"}, serverArgs...)
	client := append([]string{"client", "-proto", "http", "-target", labTarget, "-n", "8", "-concurrency", "2", "-timeout", "3s", "-span", "before",
		"-req-bytes", "400000", "-body-stall", "1s"}, clientArgs...)
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
	return run, expired
}

// allSlowClients checks that every report of run has a cause and a
// connection (then check, when set, looks at it) and is slow_client, exact,
// naming the client's inbound connection, and that each of the expired
// handlers' deadlines was reported.
func allSlowClients(t *testing.T, run labRun, expired int, check func(export.TimeoutJSON)) {
	t.Helper()
	slow := 0
	for _, r := range run.reports {
		if r.Cause == nil || len(r.Cause.Connections) == 0 {
			t.Errorf("report without a cause or a connection: %s", jsonOf(r))
			continue
		}
		if check != nil {
			check(r)
		}
		if slowClientExact(t, r) {
			slow++
		}
	}
	t.Logf("%d handlers' deadlines expired, %d reports, %d slow_client", expired, len(run.reports), slow)
	if len(run.reports) > 0 {
		t.Logf("first: %s; waiting_at %q", summaryOf(run.reports[0]), run.reports[0].WaitingAt)
	}
	if len(run.reports) < expired {
		t.Errorf("%d reports for %d expiries", len(run.reports), expired)
	}
}

// slowClientExact checks that r is slow_client, exact, naming the
// client's inbound connection first.
func slowClientExact(t *testing.T, r export.TimeoutJSON) bool {
	t.Helper()
	first := r.Cause.Connections[0]
	if r.Cause.Class != "slow_client" || r.Cause.Confidence != "exact" || first.Peer.Port() == 8080 || first.Direction != "inbound" {
		t.Errorf("%s; first connection %v (%s), waiting_at %q, want slow_client, exact, naming the client's inbound connection", summaryOf(r), first.Peer, first.Direction, r.WaitingAt)
		return false
	}
	return true
}
