package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/lab/netlab"
)

// TestCauseTLS: HTTPS (HTTP/2 by ALPN, and HTTP/1.1 over TLS) and gRPC over
// TLS to a server blackholed after a warm-up, four workers: each timeout
// is blamed on the network with confidence exact, the request bound to its
// connection through the TLS wrapper (and, for HTTP/2, by the HTTP/2
// client's round trip, every request on the one shared connection). Before
// the TLS and HTTP/2 bindings an HTTP/2 request was never bound (probable:
// the only socket in use) and a TLS connection was "skipped, not guessed".
func TestCauseTLS(t *testing.T) {
	requireGoTracing(t)
	for _, tc := range []struct {
		name           string
		server, client []string
	}{
		{"https-h2", []string{"http-server", "-addr", ":8080", "-tls", "-delay", "50ms"},
			[]string{"-proto", "http", "-tls", "-transport", "default"}},
		{"https-http1", []string{"http-server", "-addr", ":8080", "-tls", "-delay", "50ms"},
			[]string{"-proto", "http", "-tls", "-http1", "-transport", "default"}},
		{"grpc-tls", []string{"grpc-server", "-addr", ":8080", "-tls", "-delay", "50ms"},
			[]string{"-proto", "grpc", "-tls"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := append([]string{"client", "-target", labTarget, "-n", "80", "-concurrency", "4",
				"-timeout", "1200ms", "-span", "before"}, tc.client...)
			run := runLab(t, tc.server, client, false, func(p *netlab.Pair) {
				time.Sleep(700 * time.Millisecond) // warm-up: the connections are up, TLS negotiated
				if err := p.Blackhole(8080); err != nil {
					t.Error(err)
				}
			}, "--detail", "always")
			if len(run.reports) < 8 {
				t.Fatalf("%d reports, want the requests after the blackhole to time out: %s", len(run.reports), run.stderr)
			}
			exact, byClass := 0, map[string]int{}
			for _, r := range run.reports {
				if r.Cause == nil {
					t.Fatalf("report without a cause: %+v", r)
				}
				byClass[string(r.Cause.Class)+"/"+string(r.Cause.Confidence)]++
				if !networkClasses[string(r.Cause.Class)] {
					t.Errorf("timeout under a blackhole blamed on %s (%s): %s; connections: %s", r.Cause.Class, r.Cause.Confidence, r.Cause.Summary, jsonOf(r.Cause.Connections))
				}
				if r.Cause.Confidence == "exact" {
					exact++
				} else {
					t.Logf("not exact: %s/%s: %s (note: %s)", r.Cause.Class, r.Cause.Confidence, r.Cause.Summary, r.Cause.Note)
				}
			}
			t.Logf("%d reports: %v", len(run.reports), byClass)
			if exact*100 < 97*len(run.reports) {
				t.Errorf("%d of %d reports exact, want >= 97 %%", exact, len(run.reports))
			}
		})
	}
}

// jsonOf is v as JSON, for failure messages.
func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
