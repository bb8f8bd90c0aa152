package main

import (
	"strings"
	"testing"
)

// TestTraceContextGRPCMetadata: a deadline set in a handler of a gRPC
// server with no OpenTelemetry, under a fixed inbound traceparent
// metadata: the report carries it (read as the transport decodes the
// HEADERS frame, found again through the handler's stream).
func TestTraceContextGRPCMetadata(t *testing.T) {
	requireGoTracing(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	server := []string{"grpc-server", "-addr", ":8080", "-delay", "300ms", "-deadline", "50ms", "-otel=false"}
	run := runLabProtoServer(t, server, []string{"-proto", "grpc", "-n", "5", "-timeout", "2s", "-traceparent", tp}, "--detail", "always")
	if len(run.reports) != 5 {
		t.Fatalf("want 5 server-side expiries, got %d: %s", len(run.reports), run.stderr)
	}
	for _, r := range run.reports {
		if r.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || r.SpanID != "00f067aa0ba902b7" || r.TraceSource != "grpc_metadata" {
			t.Errorf("report trace %q span %q source %q note %q, want the inbound traceparent from grpc_metadata",
				r.TraceID, r.SpanID, r.TraceSource, r.TraceNote)
		}
	}
}

// TestTraceContextGRPCNoMetadata: the same server, requests without a
// traceparent: no report borrows another stream's trace (the reader
// goroutine and the streams are reused).
func TestTraceContextGRPCNoMetadata(t *testing.T) {
	requireGoTracing(t)
	server := []string{"grpc-server", "-addr", ":8080", "-delay", "300ms", "-deadline", "50ms", "-otel=false"}
	run := runLabProtoServer(t, server, []string{"-proto", "grpc", "-n", "5", "-timeout", "2s", "-span", "none"}, "--detail", "always")
	if len(run.reports) != 5 {
		t.Fatalf("want 5 server-side expiries, got %d: %s", len(run.reports), run.stderr)
	}
	for _, r := range run.reports {
		if r.TraceID != "" || r.TraceSource != "" {
			t.Errorf("report with trace %q source %q, want none", r.TraceID, r.TraceSource)
		}
	}
}

// TestCauseGRPCSlowPeerExact: gRPC calls to a server slower than the
// deadline: with the detail tier, each call is bound to its connection at
// (*http2Client).NewStream, and at the expiry through waitOnHeader's
// stream; both name the same connection (via "waiting:…+binding:
// grpc_stream"), so the verdict is slow_peer and exact — the transport's
// own goroutines do the I/O, so without the bindings it could only be
// inferred.
func TestCauseGRPCSlowPeerExact(t *testing.T) {
	requireGoTracing(t)
	server := []string{"grpc-server", "-addr", ":8080", "-delay", "400ms"}
	client := []string{"client", "-proto", "grpc", "-target", labTarget, "-n", "6", "-concurrency", "1", "-timeout", "150ms", "-span", "before"}
	run := runLab(t, server, client, false, nil, "--detail", "always")
	expired := 0
	for _, l := range run.client {
		if l.Outcome == "deadline_exceeded" {
			expired++
		}
	}
	if expired == 0 || len(run.reports) < expired {
		t.Fatalf("%d expiries logged, %d reported: %s", expired, len(run.reports), run.stderr)
	}
	for _, r := range run.reports {
		if r.Cause == nil {
			t.Fatalf("report without a cause: %+v", r)
		}
		t.Logf("report goroutine %d created %d: %s/%s %q", r.Goroutine, r.CreatedGoid, r.Cause.Class, r.Cause.Confidence, r.Cause.Note)
		if r.Cause.Class != "slow_peer" || r.Cause.Confidence != "exact" {
			t.Errorf("cause %s/%s (note %q), want slow_peer/exact", r.Cause.Class, r.Cause.Confidence, r.Cause.Note)
			continue
		}
		via := ""
		for _, c := range r.Cause.Connections {
			via += c.Via + " "
		}
		if !strings.Contains(via, "binding:grpc_stream") {
			t.Errorf("connections bound via %q, want binding:grpc_stream", via)
		}
	}
}
