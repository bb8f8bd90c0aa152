package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/lab/netlab"
	"github.com/timeout-tracer/tracer/lab/testprog"
)

// labLine is one JSON line of the lab application: the ground truth.
type labLine struct {
	Side       string  `json:"side"`
	TraceID    string  `json:"trace_id"`
	SpanID     string  `json:"span_id"`  // the span current when the deadline was set (-span before)
	Span       string  `json:"span"`     // -span mixed: before, inside or none
	Deadline   string  `json:"deadline"` // the request's (client) or handler's (server) deadline, to the ns
	Outcome    string  `json:"outcome"`
	Target     string  `json:"target"`
	DurationMS float64 `json:"duration_ms"`
	Summary    bool    `json:"summary"`
	Error      any     `json:"error"` // the error text; a count in the summary line
}

// labRun runs a lab server in the server namespace and a lab client in the
// client namespace, traces one of them, and returns both sides' lines.
type labRun struct {
	client, server []labLine
	reports        []export.TimeoutJSON
	stderr         string
	stderrBuf      *bytes.Buffer
	lines          []string // every line the tracer printed
	// sched is the kernel's run-queue account of the traced process
	// while it ran (schedstat_test.go).
	sched *schedSampler
}

// runLab starts the server, then the client paused (-wait); traces the
// client (traceServer false) or the server; releases the client and waits.
func runLab(t *testing.T, serverArgs, clientArgs []string, traceServer bool, during func(*netlab.Pair), traceArgs ...string) labRun {
	t.Helper()
	return runLabCmd(t, serverArgs, clientArgs, traceServer, during, append([]string{"trace", "--pid", "PID", "-o", "json"}, traceArgs...))
}

// runLabCmd is runLab with the whole tracer command line; "PID" in it
// stands for the traced process.
func runLabCmd(t *testing.T, serverArgs, clientArgs []string, traceServer bool, during func(*netlab.Pair), tracerArgs []string, setup ...func(*netlab.Pair) error) labRun {
	t.Helper()
	p := netlab.NewPair(t)
	for _, f := range setup {
		if err := f(p); err != nil {
			t.Fatal(err)
		}
	}
	lab := testprog.Path(t, "labapp")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Servers: the first listens on :8080 (its own args say so); more
	// servers are separated by "--" in serverArgs.
	var servers []*exec.Cmd
	var srvOut bytes.Buffer
	var srvMu sync.Mutex
	for _, sargs := range splitArgs(serverArgs) {
		srv := p.ServerCmd(ctx, lab, sargs...)
		srvPipe, _ := srv.StdoutPipe()
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { srv.Process.Kill(); srv.Wait() }()
		sbr := bufio.NewReader(srvPipe)
		if line, err := sbr.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
			t.Fatalf("server not ready: %q %v", line, err)
		}
		go func() {
			sc := bufio.NewScanner(sbr)
			for sc.Scan() {
				srvMu.Lock()
				srvOut.Write(append(sc.Bytes(), '\n'))
				srvMu.Unlock()
			}
		}()
		servers = append(servers, srv)
	}
	srv := servers[0]

	args := append([]string(nil), clientArgs...)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "SERVER", p.ServerAddr.String())
	}
	cl := p.ClientCmd(ctx, lab, append(args, "-wait")...)
	stdin, _ := cl.StdinPipe()
	clPipe, _ := cl.StdoutPipe()
	if err := cl.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cl.Process.Kill(); cl.Wait() }()
	cbr := bufio.NewReader(clPipe)
	if line, err := cbr.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("client not ready: %q %v", line, err)
	}

	target := cl.Process.Pid
	if traceServer {
		target = srv.Process.Pid
	}
	var run labRun
	run.sched = sampleSchedstat(target)
	defer run.sched.Stop()
	args = append([]string(nil), tracerArgs...)
	for i, a := range args {
		if a == "PID" {
			args[i] = fmt.Sprint(target)
		}
	}
	tr := exec.CommandContext(ctx, testprog.Tracer(t), args...)
	var stderr bytes.Buffer
	tr.Stderr = &stderr
	trOut, _ := tr.StdoutPipe()
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	defer tr.Process.Kill()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stderr.String(), "tracing pid") && !strings.Contains(stderr.String(), "recording pid"); {
		if time.Now().After(deadline) || tr.ProcessState != nil {
			t.Fatalf("tracer did not attach: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	run.stderrBuf = &stderr
	reports := make(chan []export.TimeoutJSON)
	var rawLines []string
	go func() {
		var rs []export.TimeoutJSON
		sc := bufio.NewScanner(trOut)
		for sc.Scan() {
			rawLines = append(rawLines, sc.Text())
			var r export.TimeoutJSON
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Kind == "timeout" {
				rs = append(rs, r)
			}
		}
		reports <- rs
	}()
	io.WriteString(stdin, "go\n")
	if during != nil {
		go during(p)
	}
	sc := bufio.NewScanner(cbr)
	for sc.Scan() {
		var l labLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("client line %q: %v", sc.Text(), err)
		}
		if !l.Summary {
			run.client = append(run.client, l)
		}
	}
	cl.Wait()
	if !traceServer {
		run.sched.Stop()
	}
	time.Sleep(500 * time.Millisecond) // late expiries (the server side's) reach the tracer
	if traceServer {
		srv.Process.Kill()
	} else {
		tr.Process.Signal(os.Interrupt)
	}
	select {
	case run.reports = <-reports:
		run.lines = rawLines
	case <-time.After(10 * time.Second):
		t.Fatal("tracer output did not end")
	}
	tr.Wait()
	run.stderr = stderr.String()
	srvMu.Lock()
	defer srvMu.Unlock()
	for _, line := range strings.Split(srvOut.String(), "\n") {
		var l labLine
		if json.Unmarshal([]byte(line), &l) == nil && l.Side == "server" {
			run.server = append(run.server, l)
		}
	}
	return run
}

// checkTraceIDs: at least minShare of the expiries the side logged are
// reported with their trace ID; the rest with an empty one; no report with
// an ID that is not an expired request's.
func checkTraceIDs(t *testing.T, logged []labLine, reports []export.TimeoutJSON, timeout time.Duration, minShare float64) {
	t.Helper()
	expired := map[string]bool{}
	// A request whose peer's deadline answered first may still see its own
	// timer fire before it cancels: reporting that one is right too.
	raced := map[string]bool{}
	n := 0
	for _, l := range logged {
		if l.Outcome == "remote_deadline_exceeded" {
			raced[l.TraceID] = true
		}
		// An answer that arrived at the deadline: the request succeeded,
		// and its timer may still fire before the client cancels it.
		if l.Outcome == "ok" && l.DurationMS >= 0.9*float64(timeout.Milliseconds()) {
			raced[l.TraceID] = true
		}
		if l.Outcome == "deadline_exceeded" {
			n++
			if l.TraceID == "" {
				t.Fatalf("the lab logged an expiry without a trace ID: %+v", l)
			}
			expired[l.TraceID] = true
		}
	}
	if n == 0 {
		t.Fatal("no request expired: the scenario proves nothing")
	}
	matched := map[string]bool{}
	for _, r := range reports {
		switch {
		case r.TraceID == "":
		case raced[r.TraceID]:
		case expired[r.TraceID]:
			if matched[r.TraceID] {
				t.Errorf("trace %s reported twice", r.TraceID)
			}
			matched[r.TraceID] = true
		default:
			t.Errorf("WRONG trace ID %s (source %s): no expired request had it", r.TraceID, r.TraceSource)
		}
	}
	share := float64(len(matched)) / float64(n)
	t.Logf("%d expiries logged, %d reports, %d with the right trace ID (%.1f%%)", n, len(reports), len(matched), 100*share)
	if share < minShare {
		t.Errorf("only %.1f%% of expiries carry their trace ID, want >= %.0f%%", 100*share, 100*minShare)
	}
}

func TestTraceContextSpanBeforeDeadline(t *testing.T) {
	requireGoTracing(t)
	for _, proto := range []string{"http", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			server := []string{proto + "-server", "-addr", ":8080", "-delay", "300ms"}
			run := runLabProto(t, proto, server, []string{"-n", "40", "-concurrency", "4", "-timeout", clientTimeout.String(), "-span", "before"}, "--detail", "never")
			checkTraceIDs(t, run.client, run.reports, clientTimeout, 0.99)
			for _, r := range run.reports {
				if r.TraceID != "" && r.TraceSource != "otel_context" {
					t.Errorf("source %q, want otel_context", r.TraceSource)
				}
			}
		})
	}
}

func TestTraceContextSpanInsideCall(t *testing.T) {
	requireGoTracing(t)
	for _, proto := range []string{"http", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			server := []string{proto + "-server", "-addr", ":8080", "-delay", "300ms"}
			run := runLabProto(t, proto, server, []string{"-n", "40", "-concurrency", "4", "-timeout", clientTimeout.String(), "-span", "inside"}, "--detail", "always")
			checkTraceIDs(t, run.client, run.reports, clientTimeout, 0.99)
		})
	}
}

// TestTraceContextInboundTraceparent: a deadline set in a handler of a
// server with no OpenTelemetry, under a fixed inbound traceparent.
func TestTraceContextInboundTraceparent(t *testing.T) {
	requireGoTracing(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	server := []string{"http-server", "-addr", ":8080", "-delay", "300ms", "-deadline", "50ms", "-otel=false"}
	run := runLabProtoServer(t, server, []string{"-proto", "http", "-n", "5", "-timeout", "2s", "-traceparent", tp}, "--detail", "always")
	if len(run.reports) != 5 {
		t.Fatalf("want 5 server-side expiries, got %d: %s", len(run.reports), run.stderr)
	}
	for _, r := range run.reports {
		if r.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || r.SpanID != "00f067aa0ba902b7" || r.TraceSource != "http_traceparent" {
			t.Errorf("report %+v, want the inbound traceparent", r)
		}
	}
}

// TestTraceContextNoTracing: a program with no tracing at all gets empty
// trace IDs, with the reason, and everything else unchanged.
func TestTraceContextNoTracing(t *testing.T) {
	requireGoTracing(t)
	run := runTraced(t, testprog.Path(t, "deadlines"), []string{"-rounds", "2", "-http=false"}, "--detail", "never")
	checkExact(t, run)
	for _, r := range run.reports {
		if r.TraceID != "" || r.SpanID != "" || r.TraceSource != "" || r.TraceNote == "" {
			t.Errorf("want no trace and a note: %+v", r)
		}
	}
}

// TestTraceContextConcurrentMixed: 200 requests, 50 at a time, some
// expiring, some not: no report carries another request's trace ID.
func TestTraceContextConcurrentMixed(t *testing.T) {
	requireGoTracing(t)
	server := []string{"http-server", "-addr", ":8080", "-delay", "60ms", "-delay-jitter", "80ms"}
	run := runLabProto(t, "http", server, []string{"-n", "200", "-concurrency", "50", "-timeout", clientTimeout.String(), "-span", "before"}, "--detail", "never")
	ok := 0
	for _, l := range run.client {
		if l.Outcome == "ok" {
			ok++
		}
	}
	if ok == 0 {
		t.Fatal("no request succeeded: not a mixed run")
	}
	checkTraceIDs(t, run.client, run.reports, clientTimeout, 0.99)
}

// TestTraceContextSpanInsideReusedContexts: spans opened inside the call
// (the deadline's only span is the transport's, below it), four
// long-lived workers making request after request, about half of them
// answered in time. A met deadline left its child-span entry behind, the
// GC gave its address to a later context, and that context's expiry took
// the earlier request's trace ID: 5-7 % of the reports. No report may
// carry an ID that is not an expired request's.
func TestTraceContextSpanInsideReusedContexts(t *testing.T) {
	requireGoTracing(t)
	for _, proto := range []string{"http", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			server := []string{proto + "-server", "-addr", ":8080", "-delay", "60ms", "-delay-jitter", "80ms"}
			run := runLabProto(t, proto, server, []string{"-n", "400", "-concurrency", "4", "-timeout", clientTimeout.String(), "-span", "inside"}, "--detail", "always")
			checkTraceIDs(t, run.client, run.reports, clientTimeout, 0.97)
		})
	}
}

// splitArgs splits server arguments at "--": one list per server.
func splitArgs(args []string) [][]string {
	var out [][]string
	cur := []string{}
	for _, a := range args {
		if a == "--" {
			out = append(out, cur)
			cur = []string{}
			continue
		}
		cur = append(cur, a)
	}
	return append(out, cur)
}

// clientTimeout is the lab client's per-request timeout in these tests.
const clientTimeout = 100 * time.Millisecond

// labTarget stands for the server's address in client arguments.
const labTarget = "SERVER:8080"

// runLabProto traces the client against a server at the pair's address.
func runLabProto(t *testing.T, proto string, server, client []string, traceArgs ...string) labRun {
	return runLab(t, server, append([]string{"client", "-proto", proto, "-target", labTarget}, client...), false, nil, traceArgs...)
}

// runLabProtoServer traces the server.
func runLabProtoServer(t *testing.T, server, client []string, traceArgs ...string) labRun {
	return runLab(t, server, append([]string{"client", "-target", labTarget}, client...), true, nil, traceArgs...)
}
