package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/lab/testprog"
)

var (
	traceIDRE = regexp.MustCompile(`^[0-9a-f]{32}$`)
	spanIDRE  = regexp.MustCompile(`^[0-9a-f]{16}$`)
)

// record is any labapp JSON line.
type record struct {
	Side       string  `json:"side"`
	Proto      string  `json:"proto"`
	Seq        int     `json:"seq"`
	TraceID    string  `json:"trace_id"`
	SpanID     string  `json:"span_id"`
	CallSpanID string  `json:"call_span_id"`
	Outcome    string  `json:"outcome"`
	Error      string  `json:"error"`
	DurationMS float64 `json:"duration_ms"`
}

// summary is the client's last line.
type summary struct {
	Summary          bool `json:"summary"`
	OK               int  `json:"ok"`
	DeadlineExceeded int  `json:"deadline_exceeded"`
	RemoteDeadline   int  `json:"remote_deadline_exceeded"`
	Error            int  `json:"error"`
}

// server is a running labapp server.
type server struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
	mu   sync.Mutex
	out  []string
}

// startServer runs "labapp <kind>-server -addr 127.0.0.1:0 args..." and
// waits for its ready line.
func startServer(t *testing.T, kind string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(testprog.Path(t, "labapp"),
		append([]string{kind + "-server", "-addr", "127.0.0.1:0"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, done: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "ready ") {
				ready <- l
			} else {
				s.mu.Lock()
				s.out = append(s.out, l)
				s.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { s.stop(t) })
	select {
	case l := <-ready:
		var pid int
		if _, err := fmt.Sscanf(l, "ready %d %s", &pid, &s.addr); err != nil || pid != cmd.Process.Pid {
			t.Fatalf("ready line %q (pid %d): %v", l, cmd.Process.Pid, err)
		}
	case <-s.done:
		t.Fatalf("%s server exited before ready: %s", kind, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("%s server not ready", kind)
	}
	return s
}

// stop ends the server with SIGTERM, which lets handlers in flight finish,
// and returns its request records.
func (s *server) stop(t *testing.T) []record {
	t.Helper()
	if s.cmd.ProcessState == nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
		}
		if err := s.cmd.Wait(); err != nil {
			t.Errorf("server: %v", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return parseRecords(t, s.out)
}

// runClientProc runs "labapp client -target addr args...", checks its ready and
// summary lines, and returns the per-request records, in seq order.
func runClientProc(t *testing.T, addr string, args ...string) []record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testprog.Path(t, "labapp"), append([]string{"client", "-target", addr}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client %v: %v\n%s", args, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if want := fmt.Sprintf("ready %d", cmd.Process.Pid); lines[0] != want {
		t.Fatalf("first line %q, want %q", lines[0], want)
	}
	var sum summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || !sum.Summary {
		t.Fatalf("no summary line last: %q %v", out, err)
	}
	recs := parseRecords(t, lines[1:len(lines)-1])
	counts := map[string]int{}
	for _, r := range recs {
		if r.Side != "client" {
			t.Errorf("client line with side %q", r.Side)
		}
		counts[r.Outcome]++
	}
	if sum.OK != counts[outcomeOK] || sum.DeadlineExceeded != counts[outcomeDeadlineExceeded] ||
		sum.RemoteDeadline != counts[outcomeRemoteDeadline] || sum.Error != counts[outcomeError] {
		t.Errorf("summary %+v does not match the lines %v", sum, counts)
	}
	slices.SortFunc(recs, func(a, b record) int { return a.Seq - b.Seq })
	return recs
}

func parseRecords(t *testing.T, lines []string) []record {
	t.Helper()
	var recs []record
	for _, l := range lines {
		var r record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func traceIDs(recs []record) []string {
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.TraceID)
	}
	slices.Sort(ids)
	return ids
}

// checkClientTrace checks the IDs a client line must carry in a span mode.
func checkClientTrace(t *testing.T, span string, r record) {
	t.Helper()
	switch span {
	case spanNone:
		if r.TraceID != "" || r.SpanID != "" || r.CallSpanID != "" {
			t.Errorf("seq %d: IDs %q %q %q without OTel", r.Seq, r.TraceID, r.SpanID, r.CallSpanID)
		}
		return
	case spanBefore:
		if !spanIDRE.MatchString(r.SpanID) {
			t.Errorf("seq %d: span_id %q, want the span current at the deadline", r.Seq, r.SpanID)
		}
	case spanInside:
		if r.SpanID != "" {
			t.Errorf("seq %d: span_id %q, want none current at the deadline", r.Seq, r.SpanID)
		}
	}
	if !traceIDRE.MatchString(r.TraceID) {
		t.Errorf("seq %d: trace_id %q, want 32 hex", r.Seq, r.TraceID)
	}
	if !spanIDRE.MatchString(r.CallSpanID) || r.CallSpanID == r.SpanID {
		t.Errorf("seq %d: call_span_id %q, want the transport's own span", r.Seq, r.CallSpanID)
	}
}

// TestOutcomes proves the ground truth: a server slower than the client's
// timeout gives deadline_exceeded on every request, a fast one ok; trace
// IDs are there with OTel and absent without, and the server logs the trace
// IDs the client sent.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"http", "grpc"} {
		for _, span := range []string{spanBefore, spanInside, spanNone} {
			for _, slow := range []bool{true, false} {
				name := fmt.Sprintf("%s/%s/slow=%v", proto, span, slow)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					delay, timeout, want := "0s", "10s", outcomeOK
					if slow {
						delay, timeout, want = "5s", "300ms", outcomeDeadlineExceeded
					}
					const n = 6
					srv := startServer(t, proto, "-delay", delay)
					recs := runClientProc(t, srv.addr, "-proto", proto, "-span", span,
						"-n", fmt.Sprint(n), "-concurrency", "3", "-timeout", timeout)
					if len(recs) != n {
						t.Fatalf("%d client lines, want %d", len(recs), n)
					}
					for i, r := range recs {
						if r.Seq != i || r.Proto != proto {
							t.Errorf("line %d: seq %d proto %q", i, r.Seq, r.Proto)
						}
						if r.Outcome != want {
							t.Errorf("seq %d: outcome %q (%s), want %q", r.Seq, r.Outcome, r.Error, want)
						}
						checkClientTrace(t, span, r)
					}
					srvRecs := srv.stop(t)
					if len(srvRecs) != n {
						t.Fatalf("%d server lines, want %d", len(srvRecs), n)
					}
					for _, r := range srvRecs {
						if r.Side != "server" || (r.Outcome == outcomeOK) == slow {
							t.Errorf("server line %+v", r)
						}
					}
					if span != spanNone && !slices.Equal(traceIDs(srvRecs), traceIDs(recs)) {
						t.Errorf("server trace IDs %v, client's %v", traceIDs(srvRecs), traceIDs(recs))
					}
				})
			}
		}
	}
}

// TestFixedTraceparent proves that a server picks up the trace ID of an
// inbound traceparent, with and without OTel, and that -deadline makes a
// server-side deadline expire under it.
func TestFixedTraceparent(t *testing.T) {
	t.Parallel()
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		tp      = "00-" + traceID + "-00f067aa0ba902b7-01"
	)
	for _, proto := range []string{"http", "grpc"} {
		for _, withOTel := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/otel=%v", proto, withOTel), func(t *testing.T) {
				t.Parallel()
				srv := startServer(t, proto, fmt.Sprintf("-otel=%v", withOTel), "-delay", "5s", "-deadline", "100ms")
				recs := runClientProc(t, srv.addr, "-proto", proto, "-traceparent", tp, "-n", "2", "-timeout", "10s")
				for _, r := range recs {
					if r.TraceID != traceID || r.CallSpanID != "00f067aa0ba902b7" || r.SpanID != "" {
						t.Errorf("client line %+v", r)
					}
					if r.Outcome == outcomeOK {
						t.Errorf("client outcome ok, want the server's deadline error")
					}
				}
				srvRecs := srv.stop(t)
				if len(srvRecs) != 2 {
					t.Fatalf("%d server lines, want 2", len(srvRecs))
				}
				for _, r := range srvRecs {
					if r.TraceID != traceID || r.Outcome != outcomeDeadlineExceeded {
						t.Errorf("server line %+v, want trace %s and deadline_exceeded", r, traceID)
					}
					if hasSpan := spanIDRE.MatchString(r.SpanID); hasSpan != withOTel {
						t.Errorf("server span_id %q with -otel=%v", r.SpanID, withOTel)
					}
				}
			})
		}
	}
}

// TestConcurrentUniqueTraceIDs proves that under concurrency, with some
// requests timing out and some not, every request has a trace ID of its
// own.
func TestConcurrentUniqueTraceIDs(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"http", "grpc"} {
		for _, span := range []string{spanBefore, spanInside} {
			t.Run(proto+"/"+span, func(t *testing.T) {
				t.Parallel()
				const n = 150
				srv := startServer(t, proto, "-delay", "0s", "-delay-jitter", "400ms")
				recs := runClientProc(t, srv.addr, "-proto", proto, "-span", span,
					"-n", fmt.Sprint(n), "-concurrency", "50", "-timeout", "200ms")
				if len(recs) != n {
					t.Fatalf("%d client lines, want %d", len(recs), n)
				}
				seen := map[string]int{}
				outcomes := map[string]int{}
				for _, r := range recs {
					checkClientTrace(t, span, r)
					if prev, ok := seen[r.TraceID]; ok {
						t.Errorf("seq %d and %d share trace %s", prev, r.Seq, r.TraceID)
					}
					seen[r.TraceID] = r.Seq
					outcomes[r.Outcome]++
				}
				if outcomes[outcomeOK] == 0 || outcomes[outcomeDeadlineExceeded] == 0 {
					t.Errorf("outcomes %v, want a mix of ok and deadline_exceeded", outcomes)
				}
				for _, r := range srv.stop(t) {
					if _, ok := seen[r.TraceID]; !ok {
						t.Errorf("server logged trace %q, which no client request had", r.TraceID)
					}
				}
			})
		}
	}
}

// TestWait proves -wait holds the requests back until a line arrives.
func TestWait(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "http")
	cmd := exec.Command(testprog.Path(t, "labapp"), "client", "-target", srv.addr, "-wait", "-span", "none")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(stdout)
	if l, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(l, "ready ") {
		t.Fatalf("first line %q: %v", l, err)
	}
	time.Sleep(200 * time.Millisecond)
	if got := srv.logged(); got != 0 {
		t.Errorf("server handled %d requests before the go-ahead", got)
	}
	io.WriteString(stdin, "go\n")
	rest, _ := io.ReadAll(br)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rest), `"outcome":"ok"`) {
		t.Errorf("after the go-ahead: %s", rest)
	}
}

// logged is how many request lines the server has logged so far.
func (s *server) logged() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.out)
}
