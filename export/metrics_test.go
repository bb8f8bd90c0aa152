package export

import (
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/workload"
)

func tcpEv(kind event.TCPKind, cookie uint64, local, peer string, opts ...func(*event.TCP)) *event.TCP {
	e := &event.TCP{Kind: kind, PID: 4242, Comm: "orders", Cookie: cookie,
		Local: netip.MustParseAddrPort(local), Peer: netip.MustParseAddrPort(peer), State: 1, OldState: 1}
	for _, o := range opts {
		o(e)
	}
	return e
}

// feedAll gives the metrics one of everything they count.
func feedAll(m *Metrics) {
	rep := sampleReport() // rto, 2 children, budget 1.2 s (both reports)
	m.Export(&rep)
	local := sampleReport()
	local.Deadline.Kind, local.Deadline.Children = event.ExpiredAtCreation, 0
	local.Cause.Class = correlate.ClassLocal
	m.Export(&local)
	// A client socket (its connect seen), a server socket (accepted), a
	// socket seen only mid-life.
	m.ObserveTCP(tcpEv(event.TCPConnect, 1, "10.213.0.1:41544", "10.213.0.2:8080", func(e *event.TCP) { e.State, e.OldState = 2, 7 }))
	for range 3 {
		m.ObserveTCP(tcpEv(event.TCPRTO, 1, "10.213.0.1:41544", "10.213.0.2:8080"))
	}
	// Its state read at attach (in RTO backoff then): not a retransmit.
	m.ObserveTCP(tcpEv(event.TCPRTO, 1, "10.213.0.1:41544", "10.213.0.2:8080", func(e *event.TCP) { e.AtAttach = true }))
	m.ObserveTCP(tcpEv(event.TCPEstablished, 2, "10.213.0.1:50051", "10.213.0.9:45000", func(e *event.TCP) { e.OldState = 3 }))
	m.ObserveTCP(tcpEv(event.TCPFastRetransmit, 2, "10.213.0.1:50051", "10.213.0.9:45000", func(e *event.TCP) { e.Suppressed = 5 }))
	m.ObserveTCP(tcpEv(event.TCPTLP, 3, "10.213.0.1:8080", "10.213.0.7:33000"))
	m.ObserveTCP(tcpEv(event.TCPResetReceived, 4, "[fd00::1]:40000", "[fd00::2]:9090"))
	m.ObserveTCP(tcpEv(event.TCPConnectFailed, 5, "10.213.0.1:40001", "10.213.0.3:443", func(e *event.TCP) { e.Errno = syscall.ECONNREFUSED }))
	m.ObserveTCP(tcpEv(event.TCPConnectAborted, 6, "10.213.0.1:40002", "10.213.0.3:443"))
	m.ObserveTCP(tcpEv(event.TCPActivity, 1, "10.213.0.1:41544", "10.213.0.2:8080"))
	m.ObserveCall(&event.Call{PID: 4242, Comm: "orders", Kind: "http", HasDeadline: true, Remaining: 30 * time.Millisecond})
	m.ObserveCall(&event.Call{PID: 4242, Comm: "orders", Kind: "http"})
	m.ObserveHung(&event.Call{PID: 4242, Comm: "orders", Kind: "http"})
	m.Attached(1)
	m.LostEvents("tcp", func() (uint64, error) { return 7, nil })
	m.LostEvents("go", func() (uint64, error) { return 0, errors.New("closed") })
	m.MissedRuns("tcp", func() (uint64, error) { return 2, nil })
	m.MissedRuns("tcp", func() (uint64, error) { return 3, nil })
	m.SocketTable("stale", func() (uint64, error) { return 4, nil })
	m.WatchOTLP(func() OTLPStats {
		return OTLPStats{Exported: 10, Failed: 2, DroppedQueueFull: 3, DroppedShutdown: 1, Queued: 4}
	})
}

func newTestMetrics(t *testing.T) *Metrics {
	return NewMetrics(MetricsConfig{Processes: procsWith(t, 4242, "/usr/local/bin/orders-svc", "OTEL_SERVICE_NAME=orders")})
}

// Counters follow the reports and events fed in; peers are named by the
// server side's port, never an ephemeral one.
func TestMetricsCount(t *testing.T) {
	m := newTestMetrics(t)
	feedAll(m)
	for _, c := range []struct {
		got  float64
		want float64
		what string
	}{
		{testutil.ToFloat64(m.endings.WithLabelValues("orders", "", "deadline_exceeded", "rto")), 1, "rto expiry"},
		{testutil.ToFloat64(m.endings.WithLabelValues("orders", "", "parent_cancelled", "rto")), 2, "its children"},
		{testutil.ToFloat64(m.endings.WithLabelValues("orders", "", "expired_at_creation", "local")), 1, "local expiry at creation"},
		{testutil.ToFloat64(m.retransmits.WithLabelValues("rto", "10.213.0.2:8080")), 3, "RTOs of a client socket: the peer's port"},
		{testutil.ToFloat64(m.retransmits.WithLabelValues("fast_retransmit", "10.213.0.9:50051")), 1, "server socket: the local port"},
		{testutil.ToFloat64(m.retransmits.WithLabelValues("tlp", "10.213.0.7:8080")), 1, "mid-life socket, peer port ephemeral: the local port"},
		{testutil.ToFloat64(m.resets.WithLabelValues("received", "[fd00::2]:9090")), 1, "reset"},
		{testutil.ToFloat64(m.connectFailures.WithLabelValues("10.213.0.3:443", "ECONNREFUSED")), 1, "refused"},
		{testutil.ToFloat64(m.connectFailures.WithLabelValues("10.213.0.3:443", "aborted")), 1, "aborted"},
		{testutil.ToFloat64(m.suppressed), 5, "suppressed"},
		{testutil.ToFloat64(m.missing.WithLabelValues("orders", "", "http")), 1, "call without deadline"},
		{testutil.ToFloat64(m.hung.WithLabelValues("orders", "", "http")), 1, "hung call"},
		{testutil.ToFloat64(m.attached), 1, "attached"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	body := scrape(t, m)
	for _, line := range []string{
		`timeout_tracer_deadline_budget_seconds_count{namespace="",service="orders"} 2`,
		`timeout_tracer_deadline_budget_seconds_bucket{namespace="",service="orders",le="1"} 0`,
		`timeout_tracer_deadline_budget_seconds_bucket{namespace="",service="orders",le="2.5"} 2`,
		`timeout_tracer_call_deadline_remaining_seconds_bucket{call="http",namespace="",service="orders",le="0.05"} 1`,
		`timeout_tracer_ringbuffer_lost_events_total{source="tcp"} 7`,
		`timeout_tracer_ringbuffer_lost_events_total{source="go"} 0`,
		`timeout_tracer_bpf_missed_runs_total{source="tcp"} 5`,
		`timeout_tracer_bpf_missed_runs_total{source="go"} 0`,
		`timeout_tracer_tcp_socket_table_total{event="full"} 0`,
		`timeout_tracer_tcp_socket_table_total{event="stale"} 4`,
		`timeout_tracer_otlp_spans_exported_total 10`,
		`timeout_tracer_otlp_spans_dropped_total{reason="queue_full"} 3`,
		`timeout_tracer_otlp_spans_dropped_total{reason="export_failed"} 2`,
		`timeout_tracer_otlp_queue_length 4`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
	for _, bad := range []string{":45000", ":33000", ":41544"} {
		if strings.Contains(body, bad) {
			t.Errorf("an ephemeral port (%s) is a label:\n%s", bad, body)
		}
	}
}

// A socket seen only mid-life whose ports are both ephemeral gets the
// address alone; the peer and service labels are bounded, the excess
// counted under "other".
func TestMetricsLabelBounds(t *testing.T) {
	m := NewMetrics(MetricsConfig{MaxPeers: 3, MaxServices: 1, Processes: NewProcesses(0)})
	m.ObserveTCP(tcpEv(event.TCPRTO, 1, "10.0.0.1:40000", "10.0.0.2:50000"))
	if v := testutil.ToFloat64(m.retransmits.WithLabelValues("rto", "10.0.0.2")); v != 1 {
		t.Errorf("both ports ephemeral: want the address alone, got %v\n%s", v, scrape(t, m))
	}
	for i := range 10 {
		m.ObserveTCP(tcpEv(event.TCPRTO, uint64(10+i), "10.0.0.1:40000", netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), 443).String()))
	}
	if n := testutil.CollectAndCount(m.retransmits); n != 4 {
		t.Errorf("%d peer series, want 3 and other", n)
	}
	if v := testutil.ToFloat64(m.retransmits.WithLabelValues("rto", "other")); v != 8 {
		t.Errorf("other: %v, want 8", v)
	}
	for _, comm := range []string{"a", "b", "c"} {
		r := sampleReport()
		r.Deadline.PID, r.Deadline.Comm = 99, comm
		m.Export(&r)
	}
	if v := testutil.ToFloat64(m.endings.WithLabelValues("other", "other", "deadline_exceeded", "rto")); v != 2 {
		t.Errorf("services beyond the bound: %v, want 2 under other", v)
	}
	if v := testutil.ToFloat64(m.overflow.WithLabelValues("peer")) + testutil.ToFloat64(m.overflow.WithLabelValues("service")); v != 8+2 {
		t.Errorf("overflow counted %v, want 10", v)
	}
}

// The exposition passes promlint (naming, units, help) with every metric
// present.
func TestMetricsPromlint(t *testing.T) {
	m := newTestMetrics(t)
	feedAll(m)
	problems, err := promlint.New(strings.NewReader(scrape(t, m))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// build_info carries the version given and the Go release, at 1.
func TestMetricsBuildInfo(t *testing.T) {
	m := NewMetrics(MetricsConfig{Version: "0.1.0 (commit abc)"})
	want := fmt.Sprintf("timeout_tracer_build_info{goversion=%q,version=%q} 1\n", runtime.Version(), "0.1.0 (commit abc)")
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader("# HELP timeout_tracer_build_info Always 1: the tracer's version and the Go release that built it, as labels (join it on instance to tell versions apart during a rollout).\n# TYPE timeout_tracer_build_info gauge\n"+want), "timeout_tracer_build_info"); err != nil {
		t.Error(err)
	}
	if err := testutil.GatherAndCompare(NewMetrics(MetricsConfig{}).Registry(), strings.NewReader("# HELP timeout_tracer_build_info Always 1: the tracer's version and the Go release that built it, as labels (join it on instance to tell versions apart during a rollout).\n# TYPE timeout_tracer_build_info gauge\n"+fmt.Sprintf("timeout_tracer_build_info{goversion=%q,version=\"dev\"} 1\n", runtime.Version())), "timeout_tracer_build_info"); err != nil {
		t.Error(err)
	}
}

// Two workloads running the same executable in two namespaces are two
// services: the pod's app label names each, the namespace keeps them
// apart; the process's own OTEL_SERVICE_NAME comes first.
func TestMetricsServiceAndNamespaceFromThePod(t *testing.T) {
	procs := NewProcesses(0)
	procs.Add(ProcessOf(workload.Identity{PID: 10, ExeName: "server", Namespace: "shop", Pod: "cart-1",
		App: workload.PodApp(map[string]string{"app.kubernetes.io/name": "cart", "app": "old"})}))
	procs.Add(ProcessOf(workload.Identity{PID: 11, ExeName: "server", Namespace: "bank", Pod: "cart-2",
		App: workload.PodApp(map[string]string{"app": "cart"})}))
	procs.Add(ProcessOf(workload.Identity{PID: 12, ExeName: "server", Namespace: "bank", App: "cart",
		Service: workload.Service{Name: "ledger"}}))
	m := NewMetrics(MetricsConfig{Processes: procs})
	for _, pid := range []uint32{10, 11, 11, 12} {
		rep := sampleReport()
		rep.Deadline.PID, rep.Deadline.Children = pid, 0
		m.Export(&rep)
	}
	for _, c := range []struct {
		svc, ns string
		want    float64
	}{{"cart", "shop", 1}, {"cart", "bank", 2}, {"ledger", "bank", 1}} {
		if v := testutil.ToFloat64(m.endings.WithLabelValues(c.svc, c.ns, "deadline_exceeded", "rto")); v != c.want {
			t.Errorf("endings{service=%q,namespace=%q} = %v, want %v", c.svc, c.ns, v, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.endings); n != 3 {
		t.Errorf("%d endings series, want 3", n)
	}
}

// A peer idle for PeerIdle gives its slot to a new one, its series
// removed; a peer still talking keeps its own.
func TestMetricsPeerIdleEviction(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	m := NewMetrics(MetricsConfig{MaxPeers: 2, PeerIdle: time.Minute, Now: func() time.Time { return now }, Processes: NewProcesses(0)})
	rto := func(cookie uint64, peer string) { m.ObserveTCP(tcpEv(event.TCPRTO, cookie, "10.0.0.1:40000", peer)) }
	rto(1, "10.1.0.1:443")
	rto(2, "10.1.0.2:443")
	now = now.Add(30 * time.Second)
	rto(3, "10.1.0.3:443") // both slots busy, neither idle
	if v := testutil.ToFloat64(m.retransmits.WithLabelValues("rto", "other")); v != 1 {
		t.Fatalf("a third peer with both slots busy: other %v, want 1", v)
	}
	now = now.Add(60 * time.Second)
	rto(2, "10.1.0.2:443") // still talking
	now = now.Add(30 * time.Second)
	rto(4, "10.1.0.4:443") // 10.1.0.1 idle for 2 min: its slot
	body := scrape(t, m)
	for _, want := range []string{`peer="10.1.0.2:443"`, `peer="10.1.0.4:443"`} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, `peer="10.1.0.1:443"`) {
		t.Errorf("the idle peer's series are still there:\n%s", body)
	}
	never := NewMetrics(MetricsConfig{MaxPeers: 1, PeerIdle: -1, Now: func() time.Time { return now }, Processes: NewProcesses(0)})
	never.ObserveTCP(tcpEv(event.TCPRTO, 1, "10.0.0.1:40000", "10.1.0.1:443"))
	now = now.Add(time.Hour)
	never.ObserveTCP(tcpEv(event.TCPRTO, 2, "10.0.0.1:40000", "10.1.0.2:443"))
	if v := testutil.ToFloat64(never.retransmits.WithLabelValues("rto", "other")); v != 1 {
		t.Errorf("PeerIdle < 0: other %v, want 1 (no eviction)", v)
	}
}

// The scrape passes promlint (Prometheus's own naming and help checks),
// with every series fed, the losses, the storm guard and the OTLP
// counters registered: what a ServiceMonitor would pull from the daemon.
func TestMetricsPromlintEverySource(t *testing.T) {
	m := newTestMetrics(t)
	feedAll(m)
	m.LostEvents("tcp", func() (uint64, error) { return 1, nil })
	m.MissedRuns("go", func() (uint64, error) { return 2, nil })
	m.WatchStorm(func() StormStats { return StormStats{Trips: 1} })
	m.WatchOTLP(func() OTLPStats { return OTLPStats{Exported: 3} })
	m.Attached(1)
	m.ProcessSkipped("excluded_exe")
	m.ObserveAttach(50 * time.Millisecond)
	problems, err := promlint.New(strings.NewReader(scrape(t, m))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}
