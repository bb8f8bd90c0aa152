package main

import "testing"

// TestTraceContextGoroutineAncestry: a server with no OpenTelemetry whose
// handler sets its deadline on a goroutine of its own: the inbound
// traceparent belongs to the serving goroutine, and the goroutine it
// started inherits it (runtime.newproc1, detail tier): trace_source
// goroutine.
func TestTraceContextGoroutineAncestry(t *testing.T) {
	requireGoTracing(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	server := []string{"http-server", "-addr", ":8080", "-delay", "300ms", "-deadline", "50ms", "-spawn", "-otel=false"}
	run := runLabProtoServer(t, server, []string{"-proto", "http", "-n", "5", "-timeout", "2s", "-traceparent", tp}, "--detail", "always")
	if len(run.reports) != 5 {
		t.Fatalf("want 5 server-side expiries, got %d: %s", len(run.reports), run.stderr)
	}
	for _, r := range run.reports {
		if r.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || r.SpanID != "00f067aa0ba902b7" || r.TraceSource != "goroutine" {
			t.Errorf("report trace %q span %q source %q note %q, want the inbound traceparent inherited (goroutine)",
				r.TraceID, r.SpanID, r.TraceSource, r.TraceNote)
		}
	}
}

// TestTraceContextGoroutineNoInheritance: the same server, requests with
// no traceparent: the spawned goroutines inherit nothing, and no report
// gets a trace (the accept loop's and the runtime's goroutines start
// others too: none of them lends one).
func TestTraceContextGoroutineNoInheritance(t *testing.T) {
	requireGoTracing(t)
	server := []string{"http-server", "-addr", ":8080", "-delay", "300ms", "-deadline", "50ms", "-spawn", "-otel=false"}
	run := runLabProtoServer(t, server, []string{"-proto", "http", "-n", "5", "-timeout", "2s", "-span", "none"}, "--detail", "always")
	if len(run.reports) != 5 {
		t.Fatalf("want 5 server-side expiries, got %d: %s", len(run.reports), run.stderr)
	}
	for _, r := range run.reports {
		if r.TraceID != "" || r.TraceSource != "" {
			t.Errorf("report with trace %q source %q, want none", r.TraceID, r.TraceSource)
		}
	}
}
