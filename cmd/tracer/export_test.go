package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/lab/netlab"
)

// freeLoopbackPort is a loopback port nothing listens on now.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// rtoLab is the lab scenario of TestCauseRTOMidRequest, shorter: requests
// on a kept-alive connection, then a blackhole, so that the requests time
// out waiting on RTOs (later ones on SYN retries).
func rtoLab(t *testing.T, tracerArgs ...string) labRun {
	server := []string{"http-server", "-addr", ":8080", "-delay", "50ms"}
	client := []string{"client", "-proto", "http", "-target", labTarget, "-n", "12", "-concurrency", "1", "-timeout", "1200ms", "-span", "before"}
	return runLabCmd(t, server, client, false, func(p *netlab.Pair) {
		time.Sleep(300 * time.Millisecond) // ~5 requests answered first
		if err := p.Blackhole(8080); err != nil {
			t.Error(err)
		}
	}, append([]string{"trace", "--pid", "PID", "-o", "json", "--detail", "always"}, tracerArgs...))
}

// expiredRequests maps the trace ID of every request the client logged as
// expired to the span that was current when its deadline was set.
func expiredRequests(t *testing.T, run labRun) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range run.client {
		if l.Outcome == "deadline_exceeded" {
			out[l.TraceID] = l.SpanID
		}
	}
	if len(out) == 0 {
		t.Fatalf("no request expired: the scenario proves nothing\n%s", run.stderr)
	}
	return out
}

var otlpSummary = regexp.MustCompile(`otlp: (\d+) spans exported, (\d+) failed, (\d+) dropped \(queue full\), (\d+) dropped at exit`)

// otlpCounts reads the tracer's closing OTLP line: exported, and failed or
// dropped.
func otlpCounts(t *testing.T, stderr string) (exported, lost int) {
	t.Helper()
	m := otlpSummary.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no OTLP summary line on stderr:\n%s", stderr)
	}
	n := make([]int, 4)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return n[0], n[1] + n[2] + n[3]
}

// TestOTLPToJaeger: the lab client's requests time out on RTOs while the
// tracer exports OTLP to a real Jaeger, over gRPC (configured by flags)
// and HTTP/protobuf (configured by the standard OTEL_EXPORTER_OTLP_*
// variables). Every timeout span sits in the client's own trace, under
// the span that was current when the request set its deadline, with the
// cause attributes, one log per TCP event, and the client's service name.
func TestOTLPToJaeger(t *testing.T) {
	requireGoTracing(t)
	j := startJaeger(t)
	t.Setenv("OTEL_SERVICE_NAME", "lab-client") // the lab client's own (it inherits the test's environment)
	for _, protocol := range export.Protocols {
		t.Run(protocol, func(t *testing.T) {
			args := []string{"--otlp"}
			if protocol == export.ProtocolGRPC {
				args = append(args, "--otlp-protocol", "grpc", "--otlp-endpoint", j.otlpGRPC, "--otlp-insecure")
			} else {
				t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+j.otlpHTTP)
			}
			run := rtoLab(t, args...)
			expired := expiredRequests(t, run)
			exported, lost := otlpCounts(t, run.stderr)
			if exported != len(run.reports) || lost != 0 {
				t.Errorf("%d reports, %d spans exported, %d lost:\n%s", len(run.reports), exported, lost, run.stderr)
			}
			checked, network, rtos := 0, 0, 0
			for _, r := range run.reports {
				wantParent, ok := expired[r.TraceID]
				if !ok {
					continue // a raced expiry, or no trace ID
				}
				tr := j.waitTrace(t, r.TraceID)
				sp := tr.timeoutSpan()
				if sp == nil {
					t.Errorf("trace %s in Jaeger has no timeout span: %+v", r.TraceID, tr)
					continue
				}
				checked++
				if sp.TraceID != r.TraceID {
					t.Errorf("span in trace %s, want %s", sp.TraceID, r.TraceID)
				}
				if p := sp.parent(); p != wantParent || p != r.SpanID {
					t.Errorf("trace %s: parent %q, want the client's span %q (report: %q)", r.TraceID, p, wantParent, r.SpanID)
				}
				tags := sp.tagMap()
				for k, v := range map[string]any{"event.type": "timeout", "timeout.cause": "context_deadline",
					"timeout.class": string(r.Cause.Class), "timeout.confidence": string(r.Cause.Confidence),
					"timeout.summary": r.Cause.Summary, "error": true, "process.pid": float64(r.PID)} {
					if tags[k] != v {
						t.Errorf("trace %s: tag %s = %v (%T), want %v", r.TraceID, k, tags[k], tags[k], v)
					}
				}
				if b, ok := tags["timeout.budget_ms"].(float64); !ok || math.Abs(b-1200) > 20 {
					t.Errorf("trace %s: timeout.budget_ms %v, want ~1200", r.TraceID, tags["timeout.budget_ms"])
				}
				if d := time.Duration(sp.Duration) * time.Microsecond; r.ElapsedMs == nil || math.Abs(float64(d.Microseconds())/1000-*r.ElapsedMs) > 1 {
					t.Errorf("trace %s: span lasts %v, the context lived %v ms", r.TraceID, d, r.ElapsedMs)
				}
				if !strings.HasPrefix(sp.OperationName, "deadline exceeded: main.") {
					t.Errorf("operation %q", sp.OperationName)
				}
				if svc := tr.Processes[sp.ProcessID].ServiceName; svc != "lab-client" {
					t.Errorf("service %q, want the client's OTEL_SERVICE_NAME", svc)
				}
				events := 0
				for _, c := range r.Cause.Connections {
					events += len(c.Events)
				}
				if len(sp.Logs) != min(events, 128) {
					t.Errorf("trace %s: %d logs, the report has %d TCP events", r.TraceID, len(sp.Logs), events)
				}
				checkSemconv(t, r, tags)
				rtos += checkRetransmitTypes(t, r.TraceID, sp)
				if networkClasses[string(r.Cause.Class)] {
					network++
					if tags["network.peer.port"] != float64(8080) || tags["tcp.connections"] == float64(0) {
						t.Errorf("trace %s: network cause without its peer: %v", r.TraceID, tags)
					}
					// The client opened the connection: server.* name the upstream it called.
					if c := r.Cause.Connections[0]; c.Direction != "outbound" ||
						tags["server.address"] != c.Peer.Addr().Unmap().String() || tags["server.port"] != float64(c.Peer.Port()) {
						t.Errorf("trace %s: server.address %v server.port %v, want the outbound connection's peer %v (%s)",
							r.TraceID, tags["server.address"], tags["server.port"], c.Peer, c.Direction)
					}
				}
			}
			if checked == 0 || network == 0 || rtos == 0 {
				t.Fatalf("%d timeout spans checked, %d with a network cause, %d RTO events: want some of each\n%s", checked, network, rtos, run.stderr)
			}
			t.Logf("%d expiries logged, %d reports, %d spans checked in Jaeger (%d network causes, %d RTO events)", len(expired), len(run.reports), checked, network, rtos)
		})
	}
}

// checkSemconv: the attributes of today's semantic conventions, as Jaeger
// stored them: error.type on the span, code.function.name, code.file.path
// and code.line.number from the deadline's creation, and the deprecated
// code.function, code.filepath, code.lineno beside them with the same
// values (dashboards still read those).
func checkSemconv(t *testing.T, r export.TimeoutJSON, tags map[string]any) {
	t.Helper()
	if tags["error.type"] != "timeout" {
		t.Errorf("trace %s: error.type %v, want timeout", r.TraceID, tags["error.type"])
	}
	if r.CreatedAt == nil || *r.CreatedAt == "" {
		t.Errorf("trace %s: no created_at with --detail always", r.TraceID)
		return
	}
	fn, loc, _ := strings.Cut(*r.CreatedAt, " (")
	file, line, _ := strings.Cut(strings.TrimSuffix(loc, ")"), ":")
	n, err := strconv.Atoi(line)
	if err != nil {
		t.Errorf("trace %s: created_at %q has no line", r.TraceID, *r.CreatedAt)
		return
	}
	for _, kv := range []struct {
		now, old string
		want     any
	}{{"code.function.name", "code.function", fn}, {"code.file.path", "code.filepath", file}, {"code.line.number", "code.lineno", float64(n)}} {
		if tags[kv.now] != kv.want || tags[kv.old] != kv.want {
			t.Errorf("trace %s: %s %v and %s %v, want %v (created_at %q)", r.TraceID, kv.now, tags[kv.now], kv.old, tags[kv.old], kv.want, *r.CreatedAt)
		}
	}
}

// checkRetransmitTypes: every span log of a retransmit carries the proposed
// network.tcp.retransmit.type (timeout, fast, tail_loss_probe) and no other
// log does; it returns how many RTO logs it saw.
func checkRetransmitTypes(t *testing.T, traceID string, sp *jaegerSpan) (rtos int) {
	t.Helper()
	want := map[string]string{"tcp.rto": "timeout", "tcp.fast_retransmit": "fast", "tcp.tlp": "tail_loss_probe"}
	for _, l := range sp.Logs {
		f := map[string]any{}
		for _, kv := range l.Fields {
			f[kv.Key] = kv.Value
		}
		name, _ := f["event"].(string)
		got, has := f["network.tcp.retransmit.type"]
		if w, ok := want[name]; ok {
			if got != w {
				t.Errorf("trace %s: log %s has network.tcp.retransmit.type %v, want %s", traceID, name, got, w)
			}
		} else if has {
			t.Errorf("trace %s: log %s has network.tcp.retransmit.type %v", traceID, name, got)
		}
		if name == "tcp.rto" {
			rtos++
		}
	}
	return rtos
}

// TestOTLPEndpointDownKeepsTracing: nothing listens at the OTLP endpoint
// for the whole run: every report is still printed, the tracer exits
// within its flush time, and every span is counted as failed or dropped.
func TestOTLPEndpointDownKeepsTracing(t *testing.T) {
	requireGoTracing(t)
	server := []string{"http-server", "-addr", ":8080", "-delay", "400ms"}
	client := []string{"client", "-proto", "http", "-target", labTarget, "-n", "6", "-concurrency", "1", "-timeout", "150ms", "-span", "before"}
	endpoint := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	start := time.Now()
	run := runLabCmd(t, server, client, false, nil, []string{"trace", "--pid", "PID", "-o", "json", "--detail", "always",
		"--otlp", "--otlp-protocol", "grpc", "--otlp-endpoint", endpoint, "--otlp-insecure"})
	if len(run.reports) != 6 {
		t.Fatalf("want 6 reports printed with the endpoint down, got %d\n%s", len(run.reports), run.stderr)
	}
	exported, lost := otlpCounts(t, run.stderr)
	if exported != 0 || lost != 6 {
		t.Errorf("%d exported, %d failed or dropped; want 0 and 6:\n%s", exported, lost, run.stderr)
	}
	t.Logf("run took %v; %s", time.Since(start).Round(time.Millisecond), otlpSummary.FindString(run.stderr))
}

// TestOTLPEndpointDownMidRun: the OTLP receiver stops for longer than the
// export timeout (OTEL_EXPORTER_OTLP_TIMEOUT, 1 s here; retries bridge
// shorter outages) while the lab client times out, and starts again: the
// tracer keeps printing every report, counts what it could not export, and
// exports again once the receiver is back.
func TestOTLPEndpointDownMidRun(t *testing.T) {
	requireGoTracing(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")
	rcv := newOTLPReceiver(t)
	server := []string{"http-server", "-addr", ":8080", "-delay", "400ms"}
	const n = 60 // ~9 s of timeouts: reports reach the exporter ~0.6 s after their expiry, batches go every second
	client := []string{"client", "-proto", "http", "-target", labTarget, "-n", fmt.Sprint(n), "-concurrency", "1", "-timeout", "150ms", "-span", "before"}
	var before, after int
	run := runLabCmd(t, server, client, false, func(*netlab.Pair) {
		time.Sleep(3 * time.Second)
		before = rcv.spans()
		rcv.stop()
		time.Sleep(2 * time.Second)
		rcv.start(t)
		after = rcv.spans()
	}, []string{"trace", "--pid", "PID", "-o", "json", "--detail", "always",
		"--otlp", "--otlp-protocol", "grpc", "--otlp-endpoint", rcv.addr, "--otlp-insecure"})
	if len(run.reports) != n {
		t.Fatalf("want %d reports printed, got %d\n%s", n, len(run.reports), run.stderr)
	}
	exported, lost := otlpCounts(t, run.stderr)
	total := rcv.spans()
	t.Logf("spans received: %d before the outage, %d at its end, %d in all; tracer: %d exported, %d lost", before, after, total, exported, lost)
	if before == 0 {
		t.Error("nothing exported before the outage")
	}
	if total <= after {
		t.Error("nothing exported after the receiver came back")
	}
	// At least once: a span whose answer came after the timeout is
	// counted lost although it arrived.
	if lost == 0 || exported+lost != n || total < exported || total > n {
		t.Errorf("exported %d + lost %d, want %d with some lost; the receiver got %d", exported, lost, n, total)
	}
}

// TestMetricsAfterLab: /metrics scraped at the end of the RTO scenario
// (kept up by --metrics-linger) counts exactly the reports printed, the
// RTOs by the server's address and port, and passes promlint.
func TestMetricsAfterLab(t *testing.T) {
	requireGoTracing(t)
	t.Setenv("OTEL_SERVICE_NAME", "lab-client")
	addr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	scraper := startScraper(addr)
	run := rtoLab(t, "--metrics-addr", addr, "--metrics-linger", "2s")
	body, maxAttached := scraper.stop()
	if body == "" {
		t.Fatalf("/metrics was never scraped\n%s", run.stderr)
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{}
	children, budgets := 0.0, 0.0
	for _, r := range run.reports {
		outcome := "deadline_exceeded"
		if r.Expiry == "expired_at_creation" {
			outcome = "expired_at_creation"
		}
		want["lab-client/"+outcome+"/"+string(r.Cause.Class)]++
		children += float64(r.Children)
		// The histogram observes budgets from the creation only (a span's
		// start gives the request's allowance, not the deadline's).
		if r.BudgetMs != nil && r.BudgetFrom == "creation" {
			budgets++
		}
	}
	got := map[string]float64{}
	gotChildren := 0.0
	for _, m := range family(fams, "timeout_tracer_context_endings_total") {
		l := labels(m)
		if l["outcome"] == "parent_cancelled" {
			gotChildren += m.GetCounter().GetValue()
			continue
		}
		got[l["service"]+"/"+l["outcome"]+"/"+l["cause"]] = m.GetCounter().GetValue()
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || gotChildren != children {
		t.Errorf("context endings %v (+%v children), the reports say %v (+%v)", got, gotChildren, want, children)
	}
	if h := family(fams, "timeout_tracer_deadline_budget_seconds"); len(h) != 1 || float64(h[0].GetHistogram().GetSampleCount()) != budgets {
		t.Errorf("budget histogram %v, want %v observations", h, budgets)
	}
	rtos := 0.0
	for _, m := range family(fams, "timeout_tracer_tcp_retransmits_total") {
		l := labels(m)
		if !strings.HasSuffix(l["peer"], ":8080") {
			t.Errorf("peer label %q: want the server's address and port", l["peer"])
		}
		if l["kind"] == "rto" {
			rtos += m.GetCounter().GetValue()
		}
	}
	if rtos == 0 {
		t.Errorf("no RTO counted under a blackhole:\n%s", body)
	}
	if maxAttached != 1 {
		t.Errorf("attached processes peaked at %v, want 1", maxAttached)
	}
	for _, name := range []string{"timeout_tracer_ringbuffer_lost_events_total", "timeout_tracer_otlp_spans_dropped_total"} {
		if len(family(fams, name)) == 0 {
			t.Errorf("%s missing from the scrape", name)
		}
	}
	t.Logf("%d reports, %v RTOs counted", len(run.reports), rtos)
}

func family(fams map[string]*dto.MetricFamily, name string) []*dto.Metric {
	if f, ok := fams[name]; ok {
		return f.Metric
	}
	return nil
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// scraper polls /metrics until stopped, keeping the last answer: with
// --metrics-linger the tracer serves its final counts after its last
// report.
type scraper struct {
	mu          sync.Mutex
	body        string
	maxAttached float64
	done        chan struct{}
	finished    chan struct{}
}

var attachedLine = regexp.MustCompile(`(?m)^timeout_tracer_attached_processes (\S+)$`)

func startScraper(addr string) *scraper {
	s := &scraper{done: make(chan struct{}), finished: make(chan struct{})}
	client := &http.Client{Timeout: time.Second}
	go func() {
		defer close(s.finished)
		for {
			select {
			case <-s.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			resp, err := client.Get("http://" + addr + "/metrics")
			if err != nil {
				continue
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				continue
			}
			s.mu.Lock()
			s.body = string(b)
			if m := attachedLine.FindStringSubmatch(s.body); m != nil {
				v, _ := strconv.ParseFloat(m[1], 64)
				s.maxAttached = max(s.maxAttached, v)
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *scraper) stop() (string, float64) {
	close(s.done)
	<-s.finished
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.body, s.maxAttached
}

// otlpReceiver is a minimal OTLP gRPC trace receiver on loopback that can
// stop and start again on its port.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string
	mu   sync.Mutex
	n    int
	srv  *grpc.Server
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{addr: fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))}
	r.start(t)
	t.Cleanup(r.stop)
	return r
}

// Export counts the spans.
func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.n += len(ss.Spans)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) start(t *testing.T) {
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("restart the receiver: %v", err)
		return
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go srv.Serve(ln)
}

func (r *otlpReceiver) stop() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

func (r *otlpReceiver) spans() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// jaeger is a Jaeger v2 all-in-one (in-memory storage) started by a test,
// listening on loopback only: its OTLP gRPC and HTTP receivers and its
// query API on free ports, nothing else (no admin, metrics or sampling
// ports; its own tracing off).
type jaeger struct {
	otlpGRPC, otlpHTTP, query string
}

// jaegerBinary finds the jaeger binary .ci/deps builds: $TT_JAEGER, PATH,
// or $(go env GOPATH)/bin.
func jaegerBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TT_JAEGER"); p != "" {
		return p
	}
	if p, err := exec.LookPath("jaeger"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			if p := filepath.Join(dir, "bin", "jaeger"); fileExists(p) {
				return p
			}
		}
	}
	t.Skip("Jaeger is not installed: .ci/deps builds github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0 into $(go env GOPATH)/bin (or set TT_JAEGER)")
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: mem
    enable_tracing: false
    http:
      endpoint: %s
    grpc:
      endpoint: %s
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	bin := jaegerBinary(t)
	addr := func() string { return fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t)) }
	j := &jaeger{query: addr(), otlpGRPC: addr(), otlpHTTP: addr()}
	queryGRPC := addr()
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, j.query, queryGRPC, j.otlpGRPC, j.otlpHTTP), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start jaeger: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("jaeger's log:\n%s", log.String())
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; {
		select {
		case <-exited:
			t.Fatalf("jaeger exited: %s", log.String())
		default:
		}
		if resp, err := http.Get("http://" + j.query + "/api/services"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && dialable(j.otlpGRPC) && dialable(j.otlpHTTP) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger did not come up in 60s:\n%s", log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkLoopbackOnly(t, cmd.Process.Pid)
	return j
}

func dialable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// checkLoopbackOnly fails the test if the process listens anywhere but on
// 127.0.0.1.
func checkLoopbackOnly(t *testing.T, pid int) {
	t.Helper()
	out, err := exec.Command("ss", "-Hltnp").Output()
	if err != nil {
		t.Logf("cannot list listening sockets (ss: %v): bind addresses unchecked", err)
		return
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, fmt.Sprintf("pid=%d,", pid)) {
			continue
		}
		n++
		if f := strings.Fields(line); len(f) < 4 || !strings.HasPrefix(f[3], "127.0.0.1:") {
			t.Errorf("jaeger listens beyond loopback: %s", line)
		}
	}
	if n != 4 {
		t.Errorf("jaeger listens on %d sockets, want 4 (OTLP gRPC and HTTP, query HTTP and gRPC):\n%s", n, out)
	}
}

// jaegerTrace is what Jaeger's query API returns for one trace.
type jaegerTrace struct {
	TraceID   string       `json:"traceID"`
	Spans     []jaegerSpan `json:"spans"`
	Processes map[string]struct {
		ServiceName string      `json:"serviceName"`
		Tags        []jaegerTag `json:"tags"`
	} `json:"processes"`
}

type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64       `json:"startTime"` // µs
	Duration  int64       `json:"duration"`  // µs
	Tags      []jaegerTag `json:"tags"`
	Logs      []struct {
		Timestamp int64       `json:"timestamp"`
		Fields    []jaegerTag `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
}

type jaegerTag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

func (tr *jaegerTrace) timeoutSpan() *jaegerSpan {
	for i := range tr.Spans {
		if strings.HasPrefix(tr.Spans[i].OperationName, "deadline exceeded") {
			return &tr.Spans[i]
		}
	}
	return nil
}

// parent is the span's CHILD_OF reference in its own trace.
func (s *jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" && r.TraceID == s.TraceID {
			return r.SpanID
		}
	}
	return ""
}

func (s *jaegerSpan) tagMap() map[string]any {
	m := map[string]any{}
	for _, t := range s.Tags {
		m[t.Key] = t.Value
	}
	return m
}

// waitTrace asks Jaeger's HTTP API for the trace until it is there.
func (j *jaeger) waitTrace(t *testing.T, traceID string) jaegerTrace {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := http.Get("http://" + j.query + "/api/traces/" + traceID)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Data []jaegerTrace `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err == nil && resp.StatusCode == http.StatusOK && len(body.Data) == 1 && len(body.Data[0].Spans) > 0 {
			return body.Data[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s not in Jaeger (status %d, %v)", traceID, resp.StatusCode, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestExportBadInput: mistakes in the export flags give one line that
// says what to do, before anything is attached.
func TestExportBadInput(t *testing.T) {
	tracer, _ := binaries(t)
	self := fmt.Sprint(os.Getpid()) // exists; nothing gets attached to it
	cases := []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"endpoint without --otlp", []string{"--otlp-endpoint", "localhost:4317"}, "", "need --otlp"},
		{"unknown protocol", []string{"--otlp", "--otlp-protocol", "http/json"}, "", `unknown --otlp-protocol "http/json": use grpc or http/protobuf`},
		{"protocol from the environment", []string{"--otlp"}, "OTEL_EXPORTER_OTLP_PROTOCOL=thrift", `unknown OTLP protocol "thrift"`},
		{"bad timeout", []string{"--otlp"}, "OTEL_EXPORTER_OTLP_TIMEOUT=soon", "want milliseconds"},
		{"bad metrics address", []string{"--metrics-addr", "127.0.0.1:99999"}, "", "listen on --metrics-addr"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(tracer, append([]string{"trace", "--pid", self}, tc.args...)...)
			if tc.env != "" {
				cmd.Env = append(os.Environ(), tc.env)
			}
			checkOneLineError(t, cmd, tc.want)
		})
	}
}
