package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/timeout-tracer/tracer/export"
)

// TestAuditDeadlineMissing: HTTP calls made under a context with no
// deadline at all (the lab client with -timeout 0) to a hanging server are
// reported as deadline_missing, with the request's trace ID, the target
// and the caller; calls with a deadline are not.
func TestAuditDeadlineMissing(t *testing.T) {
	requireGoTracing(t)
	server := []string{"http-server", "-addr", ":8080", "-delay", "300ms"}
	client := []string{"client", "-proto", "http", "-target", labTarget, "-n", "3", "-concurrency", "1", "-timeout", "0", "-span", "before"}
	run := runLabCmd(t, server, client, false, nil, []string{"trace", "--pid", "PID", "-o", "json", "--detail", "never", "--audit"})
	logged := map[string]bool{}
	for _, l := range run.client {
		logged[l.TraceID] = true
	}
	var missing []export.MissingJSON
	for _, line := range run.lines {
		var m export.MissingJSON
		if json.Unmarshal([]byte(line), &m) == nil && m.Kind == "deadline_missing" {
			missing = append(missing, m)
		}
	}
	if len(missing) != 3 {
		t.Fatalf("want 3 deadline_missing lines (one per call), got %d: %v\n%s", len(missing), run.lines, run.stderr)
	}
	for _, m := range missing {
		if !logged[m.TraceID] || !strings.HasSuffix(m.Target, ":8080") || !strings.HasPrefix(m.Caller, "main.") || m.Call != "http" {
			t.Errorf("deadline_missing %+v: want a logged trace ID, the server as target, the lab's caller", m)
		}
	}

	// The same calls under a deadline: no deadline_missing.
	client = []string{"client", "-proto", "http", "-target", labTarget, "-n", "3", "-concurrency", "1", "-timeout", "2s", "-span", "before"}
	run = runLabCmd(t, server, client, false, nil, []string{"trace", "--pid", "PID", "-o", "json", "--detail", "never", "--audit"})
	for _, line := range run.lines {
		if strings.Contains(line, "deadline_missing") {
			t.Errorf("a call with a deadline reported as missing one: %s", line)
		}
	}
}

// TestAuditDeadlineMissingGRPC: gRPC calls made with no deadline to a slow
// server are reported as deadline_missing (call "grpc") with the request's
// trace ID and the target, from the stream probe at NewStream; calls with a
// deadline are not. A stream has no end probe: no hung_call for gRPC.
func TestAuditDeadlineMissingGRPC(t *testing.T) {
	requireGoTracing(t)
	server := []string{"grpc-server", "-addr", ":8080", "-delay", "300ms"}
	for _, timeout := range []string{"0", "2s"} {
		client := []string{"client", "-proto", "grpc", "-target", labTarget, "-n", "3", "-concurrency", "1", "-timeout", timeout, "-span", "before"}
		run := runLabCmd(t, server, client, false, nil, []string{"trace", "--pid", "PID", "-o", "json", "--detail", "never", "--audit", "--hang-after", "200ms"})
		logged := map[string]bool{}
		for _, l := range run.client {
			logged[l.TraceID] = true
		}
		var missing []export.MissingJSON
		for _, line := range run.lines {
			var m export.MissingJSON
			if json.Unmarshal([]byte(line), &m) == nil && m.Kind == "deadline_missing" {
				missing = append(missing, m)
			}
			if strings.Contains(line, "hung_call") {
				t.Errorf("-timeout %s: a gRPC call reported hung (streams have no end probe): %s", timeout, line)
			}
		}
		if timeout != "0" {
			if len(missing) != 0 {
				t.Errorf("calls with a deadline reported as missing one: %+v", missing)
			}
			continue
		}
		if len(missing) != 3 {
			t.Fatalf("want 3 deadline_missing lines (one per call), got %d: %v\n%s", len(missing), run.lines, run.stderr)
		}
		for _, m := range missing {
			t.Logf("deadline_missing: %+v", m)
			if !logged[m.TraceID] || !strings.HasSuffix(m.Target, ":8080") || m.Call != "grpc" || m.Caller == "" {
				t.Errorf("deadline_missing %+v: want a logged trace ID, the server as target, call grpc, a caller", m)
			}
		}
	}
}

// TestAuditHungCall: a call without a deadline still waiting after
// --hang-after is reported once as hung_call, with how long it has waited
// and its connection.
func TestAuditHungCall(t *testing.T) {
	requireGoTracing(t)
	server := []string{"http-server", "-addr", ":8080", "-delay", "2500ms"}
	client := []string{"client", "-proto", "http", "-target", labTarget, "-n", "2", "-concurrency", "1", "-timeout", "0", "-span", "before"}
	run := runLabCmd(t, server, client, false, nil, []string{"trace", "--pid", "PID", "-o", "json", "--detail", "never", "--audit", "--hang-after", "1s"})
	var hung []export.HungJSON
	for _, line := range run.lines {
		var h export.HungJSON
		if json.Unmarshal([]byte(line), &h) == nil && h.Kind == "hung_call" {
			hung = append(hung, h)
		}
	}
	if len(hung) != 2 {
		t.Fatalf("want one hung_call per call, got %d: %v\n%s", len(hung), run.lines, run.stderr)
	}
	for _, h := range hung {
		if h.WaitingMs < 1000 || h.WaitingMs > 2500 || !strings.HasSuffix(h.Target, ":8080") || h.TraceID == "" {
			t.Errorf("hung_call %+v", h)
		}
	}
}
