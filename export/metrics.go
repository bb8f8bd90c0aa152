package export

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/event"
)

// Namespace prefixes every metric of the tracer.
const Namespace = "timeout_tracer"

// MetricsConfig bounds the label sets. Zero fields take their defaults.
type MetricsConfig struct {
	// MaxServices bounds the values of the service label (default 100);
	// further services are counted under "other".
	MaxServices int
	// MaxPeers bounds the values of the peer label (default 256); further
	// peers are counted under "other".
	MaxPeers int
	// EphemeralPorts is the kernel's ip_local_port_range (default 32768
	// to 60999): a port in it is never a label unless the socket's side
	// is known (see peerLabel).
	EphemeralPorts [2]uint16
	// Processes resolves service names; nil makes an empty registry.
	Processes *Processes
	// Version is the tracer's version, the build_info metric's label
	// ("dev" when empty).
	Version string
	// PeerIdle is how long a peer may go without a TCP event before its
	// series are removed and its slot freed for another (pods come and go:
	// without it the first MaxPeers peers keep the slots forever and the
	// rest count as "other"). Default 10m; negative: never.
	PeerIdle time.Duration
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Metrics are the tracer's Prometheus metrics, on a registry of their own
// (no global state). Export feeds them from reports, ObserveTCP from
// kernel TCP events; the agent-health sources are read at scrape time.
// Safe for concurrent use.
//
// Every label set is bounded; the bound of each metric is in its doc
// comment below and in docs/export.md ("Prometheus").
type Metrics struct {
	cfg MetricsConfig
	reg *prometheus.Registry

	// endings counts context endings. Labels: service (≤ MaxServices+1),
	// outcome (deadline_exceeded, expired_at_creation, parent_cancelled:
	// the children an expiry cancelled), cause (the 13 correlate classes).
	// At most (MaxServices+1) × 3 × 13 series; one service traced: 39.
	endings *prometheus.CounterVec
	// budget is the budget (deadline − creation) of expired contexts whose
	// creation was seen (detail probes on). Label: service. At most
	// (MaxServices+1) × 17 series (14 buckets, +Inf, sum, count).
	budget *prometheus.HistogramVec
	// remaining is the budget a request's context had left when it made
	// an outbound call (negative: already past, counted in the le="0"
	// bucket). Fed only while the call probes are attached (tracer trace
	// --audit; net/http calls). Labels: service, call (http, grpc, dial,
	// other). At most (MaxServices+1) × 4 × 18 series.
	remaining *prometheus.HistogramVec
	// missing counts outbound calls made under a context with no deadline
	// at all (deadline_missing), fed as remaining is. Labels: service,
	// call. At most (MaxServices+1) × 4.
	missing *prometheus.CounterVec
	// hung counts such calls still waiting after tracer trace's
	// --hang-after (hung_call), once per call. Labels: service, call. At
	// most (MaxServices+1) × 4.
	hung *prometheus.CounterVec
	// localLost is the time each expired context lost to local causes
	// during its life, one observation per report and kind whose source
	// was watching. Labels: service, kind (throttled, runqueue, gc_pause).
	// At most (MaxServices+1) × 3 × 16 series (13 buckets, +Inf, sum, count).
	localLost *prometheus.HistogramVec
	// retransmits counts kernel retransmits. Labels: kind (rto,
	// fast_retransmit, tlp, syn_retransmit, synack_retransmit,
	// retransmit), peer (≤ MaxPeers+1). At most 6 × (MaxPeers+1).
	// The RTO count is kind="rto".
	retransmits *prometheus.CounterVec
	// connectFailures counts connects that failed. Labels: peer, reason
	// (errno name of the 12 event.TCP.ErrnoName spells out, "errno" for
	// others, "none", or "aborted": the application gave up during the
	// handshake). At most 15 × (MaxPeers+1).
	connectFailures *prometheus.CounterVec
	// resets counts RSTs. Labels: direction (received, sent), peer. At most
	// 2 × (MaxPeers+1).
	resets *prometheus.CounterVec
	// suppressed counts TCP events the kernel's per-socket rate limit
	// dropped (reported with the next event of the socket). No labels.
	suppressed prometheus.Counter
	// attached is the number of processes with probes attached. No labels.
	attached prometheus.Gauge
	// skipped counts processes the node agent found and did not trace.
	// Label: reason (the node agent's short stable tokens: not_go,
	// excluded_*, not_included, cap, gone, error, ...), at most
	// MaxSkipReasons+1 series.
	skipped *prometheus.CounterVec
	// attach is the time from a process's exec to its probes attached
	// (node agent). No labels: 16 series.
	attach prometheus.Histogram
	// overflow counts label values folded into "other" because a bound
	// was reached. Label: label (service, peer, reason). 3 series.
	overflow *prometheus.CounterVec

	mu        sync.Mutex
	reasons   map[string]bool
	services  map[string]bool
	peers     map[string]time.Time // peer label → when last seen
	peerSwept time.Time
	sides     *socketSides
	sources   *sourceCollector
	// storm is registered by the first WatchStorm.
	storm     *stormCollector
	stormOnce sync.Once
}

// NewMetrics registers the metrics, with the Go runtime's and the
// process's own (go_*, process_*: the agent's memory and CPU).
func NewMetrics(cfg MetricsConfig) *Metrics {
	if cfg.MaxServices <= 0 {
		cfg.MaxServices = 100
	}
	if cfg.MaxPeers <= 0 {
		cfg.MaxPeers = 256
	}
	if cfg.PeerIdle == 0 {
		cfg.PeerIdle = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.EphemeralPorts == [2]uint16{} {
		cfg.EphemeralPorts = [2]uint16{32768, 60999}
	}
	if cfg.Processes == nil {
		cfg.Processes = NewProcesses(0)
	}
	m := &Metrics{
		cfg: cfg, reg: prometheus.NewRegistry(),
		services: map[string]bool{}, peers: map[string]time.Time{}, reasons: map[string]bool{}, sides: newSocketSides(16384),
		endings: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "context_endings_total",
			Help: "Go contexts that ended by their deadline, by service, outcome (deadline_exceeded, expired_at_creation, parent_cancelled) and cause class."},
			[]string{"service", "namespace", "outcome", "cause"}),
		budget: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "deadline_budget_seconds",
			Help:    "Budget (deadline minus creation) of the contexts that expired, where their creation was seen (detail probes), by service.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}},
			[]string{"service", "namespace"}),
		remaining: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "call_deadline_remaining_seconds",
			Help:    "Budget left in the caller's context when an outbound call was made (call probes, tracer trace --audit), by service and call kind.",
			Buckets: []float64{0, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}},
			[]string{"service", "namespace", "call"}),
		missing: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "calls_without_deadline_total",
			Help: "Outbound calls made under a context with no deadline at all (deadline_missing; call probes, tracer trace --audit), by service and call kind."},
			[]string{"service", "namespace", "call"}),
		hung: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "hung_calls_total",
			Help: "Outbound calls without a deadline still waiting after --hang-after (hung_call; tracer trace --audit), by service and call kind."},
			[]string{"service", "namespace", "call"}),
		localLost: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "timeout_local_lost_seconds",
			Help:    "Time each expired context lost to local causes during its life (cgroup CPU throttling, run-queue delay, GC stop-the-world pauses), by service and kind.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}},
			[]string{"service", "namespace", "kind"}),
		retransmits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "tcp_retransmits_total",
			Help: "TCP retransmits of traced processes' sockets, by kind (rto = the retransmission timer fired) and peer (address:server port)."},
			[]string{"kind", "peer"}),
		connectFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "tcp_connect_failures_total",
			Help: "TCP connects that failed, by peer and reason (errno name, or aborted: the application gave up during the handshake)."},
			[]string{"peer", "reason"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "tcp_resets_total",
			Help: "TCP resets received or sent on traced processes' sockets, by direction and peer."},
			[]string{"direction", "peer"}),
		suppressed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "tcp_events_suppressed_total",
			Help: "TCP events dropped by the kernel's per-socket rate limit."}),
		attached: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "attached_processes",
			Help: "Processes the tracer has attached its probes to."}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "processes_skipped_total",
			Help: "Processes the node agent found and did not trace, by reason (not_go, excluded_*, not_included, cap, gone, error)."},
			[]string{"reason"}),
		attach: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "process_attach_seconds",
			Help:    "Time from a Go process's exec to its probes attached (node agent).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}),
		overflow: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "label_overflow_total",
			Help: "Observations counted under the label value other because the label's bound of distinct values was reached, by label."},
			[]string{"label"}),
	}
	m.sources = newSourceCollector()
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help: "Always 1: the tracer's version and the Go release that built it, as labels (join it on instance to tell versions apart during a rollout)."},
		[]string{"version", "goversion"})
	buildInfo.WithLabelValues(cfg.Version, runtime.Version()).Set(1)
	m.reg.MustRegister(buildInfo)
	m.reg.MustRegister(m.endings, m.budget, m.remaining, m.missing, m.hung, m.localLost, m.retransmits, m.connectFailures, m.resets, m.suppressed, m.attached,
		m.skipped, m.attach, m.overflow, m.sources,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the metrics' registry, for tests and for other handlers.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Export counts a report: its context ending, its children's, and its
// budget.
func (m *Metrics) Export(r *correlate.Report) {
	d := &r.Deadline
	svc, ns := m.who(d.PID, d.Comm)
	cause := string(r.Cause.Class)
	if cause == "" {
		cause = string(correlate.ClassUnknown)
	}
	outcome := "deadline_exceeded"
	if d.Kind == event.ExpiredAtCreation {
		outcome = "expired_at_creation"
	}
	m.endings.WithLabelValues(svc, ns, outcome, cause).Inc()
	if d.Children > 0 {
		m.endings.WithLabelValues(svc, ns, "parent_cancelled", cause).Add(float64(d.Children))
	}
	if b, ok := d.Budget(); ok && b >= 0 {
		m.budget.WithLabelValues(svc, ns).Observe(b.Seconds())
	}
	if l := r.Cause.Local; l != nil {
		for _, f := range []struct {
			kind string
			v    *float64
		}{{"throttled", l.ThrottledMs}, {"runqueue", l.RunqueueMs}, {"gc_pause", l.GCPauseMs}} {
			if f.v != nil {
				m.localLost.WithLabelValues(svc, ns, f.kind).Observe(*f.v / 1000)
			}
		}
	}
}

// ObserveCall counts an outbound call: the budget its context had left,
// or that it had no deadline at all.
func (m *Metrics) ObserveCall(c *event.Call) {
	svc, ns, kind := m.callLabels(c)
	if !c.HasDeadline {
		m.missing.WithLabelValues(svc, ns, kind).Inc()
		return
	}
	m.remaining.WithLabelValues(svc, ns, kind).Observe(c.Remaining.Seconds())
}

// ObserveHung counts a call without a deadline that is still waiting.
func (m *Metrics) ObserveHung(c *event.Call) {
	svc, ns, kind := m.callLabels(c)
	m.hung.WithLabelValues(svc, ns, kind).Inc()
}

func (m *Metrics) callLabels(c *event.Call) (service, namespace, call string) {
	call = c.Kind
	switch call {
	case "http", "grpc", "dial":
	default:
		call = "other"
	}
	service, namespace = m.who(c.PID, c.Comm)
	return service, namespace, call
}

// Close does nothing: the metrics live until the process ends.
func (m *Metrics) Close(context.Context) error { return nil }

// ObserveTCP counts a kernel TCP event. Lifecycle events only teach which
// side of its connection a socket is.
func (m *Metrics) ObserveTCP(e *event.TCP) {
	if e.Suppressed > 0 {
		m.suppressed.Add(float64(e.Suppressed))
	}
	m.mu.Lock()
	m.sides.learn(e)
	m.mu.Unlock()
	if e.AtAttach {
		// A socket's state read at attach, not a retransmit that
		// happened now: the counters count the kernel's events.
		return
	}
	switch {
	case e.Kind.Retransmit():
		m.retransmits.WithLabelValues(e.Kind.String(), m.peerLabel(e)).Inc()
	case e.Kind == event.TCPResetReceived:
		m.resets.WithLabelValues("received", m.peerLabel(e)).Inc()
	case e.Kind == event.TCPResetSent:
		m.resets.WithLabelValues("sent", m.peerLabel(e)).Inc()
	case e.Kind == event.TCPConnectFailed:
		reason := e.ErrnoName() // one of ~12 names, or "errno N"
		switch {
		case reason == "":
			reason = "none"
		case strings.HasPrefix(reason, "errno "):
			reason = "errno"
		}
		m.connectFailures.WithLabelValues(m.peerLabel(e), reason).Inc()
	case e.Kind == event.TCPConnectAborted:
		m.connectFailures.WithLabelValues(m.peerLabel(e), "aborted").Inc()
	}
	if e.Kind == event.TCPClose {
		m.mu.Lock()
		m.sides.forget(e.Cookie)
		m.mu.Unlock()
	}
}

// Attached adds delta to the attached processes.
func (m *Metrics) Attached(delta int) { m.attached.Add(float64(delta)) }

// MaxSkipReasons bounds the reason label of processes_skipped_total.
const MaxSkipReasons = 16

// ProcessSkipped counts a process the node agent did not trace.
func (m *Metrics) ProcessSkipped(reason string) {
	m.mu.Lock()
	r := m.bounded(m.reasons, reason, MaxSkipReasons, "reason")
	m.mu.Unlock()
	m.skipped.WithLabelValues(r).Inc()
}

// ObserveAttach records how long a process waited from its exec to its
// probes attached.
func (m *Metrics) ObserveAttach(d time.Duration) { m.attach.Observe(d.Seconds()) }

// LostEvents registers a ring buffer's lost-event counter, read at scrape
// time: timeout_tracer_ringbuffer_lost_events_total{source}. total returns
// the counter since its ring buffer was created; an error keeps the last
// value (a closed collector). Sources of one name add up.
func (m *Metrics) LostEvents(source string, total func() (uint64, error)) {
	m.sources.addLost(source, total)
}

// MissedRuns registers a counter of kernel program runs the kernel
// skipped (its recursion guard), read at scrape time:
// timeout_tracer_bpf_missed_runs_total{source}. Like LostEvents: an error
// keeps the last value, sources of one name add up.
func (m *Metrics) MissedRuns(source string, total func() (uint64, error)) {
	m.sources.addMissed(source, total)
}

// SocketTable registers a counter of the kernel side's socket table, read
// at scrape time: timeout_tracer_tcp_socket_table_total{event} (full,
// stale). Like LostEvents.
func (m *Metrics) SocketTable(event string, total func() (uint64, error)) {
	m.sources.addSocks(event, total)
}

// WatchOTLP exports the OTLP exporter's counters, read at scrape time:
// timeout_tracer_otlp_spans_exported_total,
// timeout_tracer_otlp_spans_dropped_total{reason} and
// timeout_tracer_otlp_queue_length.
func (m *Metrics) WatchOTLP(stats func() OTLPStats) { m.sources.setOTLP(stats) }

// who is the service and namespace labels of process pid: the pair is
// bounded (MaxServices), "other" in both past it. The namespace is the
// pod's, "" outside Kubernetes: the same service name in two namespaces
// is two series, never one.
func (m *Metrics) who(pid uint32, comm string) (service, namespace string) {
	p := m.cfg.Processes.Lookup(pid, comm)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bounded(m.services, p.PodNamespace+"/"+p.ServiceName, m.cfg.MaxServices, "service") == "other" {
		return "other", "other"
	}
	return p.ServiceName, p.PodNamespace
}

func (m *Metrics) bounded(seen map[string]bool, v string, max int, label string) string {
	if seen[v] {
		return v
	}
	if len(seen) >= max {
		m.overflow.WithLabelValues(label).Inc()
		return "other"
	}
	seen[v] = true
	return v
}

// peerLabel names the other end of the event's connection by its address
// and the server side's port, never an ephemeral one: for a client socket
// the peer's port, for a server socket the local port (the service the
// remote address called). Which side a socket is comes from its lifecycle
// events (socketSides); for sockets seen only mid-life, from the kernel's
// ephemeral port range: a port in it is a client's. When that cannot
// decide, the label is the address alone.
func (m *Metrics) peerLabel(e *event.TCP) string {
	if !e.Peer.IsValid() {
		return "unknown"
	}
	addr := e.Peer.Addr().Unmap().String()
	if e.Peer.Addr().Unmap().Is6() {
		addr = "[" + addr + "]"
	}
	lp, pp := e.Local.Port(), e.Peer.Port()
	port := uint16(0)
	m.mu.Lock()
	defer m.mu.Unlock()
	switch side := m.sides.side(e.Cookie); {
	case side == sideClient:
		port = pp
	case side == sideServer:
		port = lp
	case m.ephemeral(lp) && !m.ephemeral(pp) && pp != 0:
		port = pp
	case m.ephemeral(pp) && !m.ephemeral(lp) && lp != 0:
		port = lp
	}
	label := addr
	if port != 0 {
		label += ":" + strconv.Itoa(int(port))
	}
	return m.peer(label)
}

// peer bounds the peer label (m.mu held): a known peer is kept and
// stamped; a new one takes a free slot, else the slot of a peer idle for
// PeerIdle (its series removed), else counts as "other".
func (m *Metrics) peer(label string) string {
	now := m.cfg.Now()
	if _, ok := m.peers[label]; ok {
		m.peers[label] = now
		return label
	}
	if len(m.peers) >= m.cfg.MaxPeers && m.cfg.PeerIdle > 0 && now.Sub(m.peerSwept) >= m.cfg.PeerIdle/10 {
		// At most ten sweeps per idle time: a storm of new peers with
		// every slot busy costs one scan, not one per event.
		m.peerSwept = now
		for p, seen := range m.peers {
			if now.Sub(seen) >= m.cfg.PeerIdle {
				delete(m.peers, p)
				for _, v := range []*prometheus.CounterVec{m.retransmits, m.resets, m.connectFailures} {
					v.DeletePartialMatch(prometheus.Labels{"peer": p})
				}
			}
		}
	}
	if len(m.peers) >= m.cfg.MaxPeers {
		m.overflow.WithLabelValues("peer").Inc()
		return "other"
	}
	m.peers[label] = now
	return label
}

func (m *Metrics) ephemeral(p uint16) bool {
	return p >= m.cfg.EphemeralPorts[0] && p <= m.cfg.EphemeralPorts[1]
}

type side uint8

const (
	sideUnknown side = iota
	sideClient
	sideServer
)

// socketSides remembers which side of its connection a socket is, learned
// from the lifecycle events that say so; bounded (when full it starts
// over: sockets then fall back to the port heuristic).
type socketSides struct {
	max int
	m   map[uint64]side
}

func newSocketSides(max int) *socketSides { return &socketSides{max: max, m: map[uint64]side{}} }

func (s *socketSides) learn(e *event.TCP) {
	if e.Cookie == 0 {
		return
	}
	var sd side
	switch e.Kind {
	case event.TCPConnect, event.TCPSynRetransmit, event.TCPConnectFailed, event.TCPConnectAborted:
		sd = sideClient
	case event.TCPSynAckRetransmit:
		sd = sideServer
	case event.TCPEstablished:
		switch e.OldState {
		case tcpSynSent:
			sd = sideClient
		case tcpSynRecv, tcpNewSynRecv:
			sd = sideServer
		}
	}
	if sd == sideUnknown {
		return
	}
	if _, ok := s.m[e.Cookie]; !ok && len(s.m) >= s.max {
		clear(s.m)
	}
	s.m[e.Cookie] = sd
}

func (s *socketSides) side(cookie uint64) side { return s.m[cookie] }

func (s *socketSides) forget(cookie uint64) { delete(s.m, cookie) }

const (
	tcpSynSent    event.TCPState = 2
	tcpSynRecv    event.TCPState = 3
	tcpNewSynRecv event.TCPState = 12
)

// sourceCollector reads counters kept elsewhere at scrape time: the ring
// buffers' lost events and the OTLP exporter's counters.
type sourceCollector struct {
	lostDesc, missedDesc, socksDesc, exportedDesc, droppedDesc, queueDesc *prometheus.Desc

	mu     sync.Mutex
	lost   []*lostSource
	missed []*lostSource
	socks  []*lostSource
	otlp   func() OTLPStats
}

type lostSource struct {
	name  string
	total func() (uint64, error)
	last  uint64
}

func newSourceCollector() *sourceCollector {
	return &sourceCollector{
		lostDesc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "ringbuffer_lost_events_total"),
			"Events the kernel could not hand to the tracer because a ring buffer was full, by source (tcp: kernel TCP events, go: deadline expiries).",
			[]string{"source"}, nil),
		missedDesc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "bpf_missed_runs_total"),
			"Runs of the tracer's kernel programs the kernel skipped because the same program (tcp) or another program of the kprobe family (go) was already running on that CPU; their events, if any, are lost. By source.",
			[]string{"source"}, nil),
		socksDesc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "tcp_socket_table_total"),
			"The kernel side's socket table, by event: full (a socket not tracked because the table was full: its events carry no owner), stale (an entry a freed socket left, found by the cookie of the socket now at its address and started afresh before it could lend that socket the old one's identity).",
			[]string{"event"}, nil),
		exportedDesc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "otlp_spans_exported_total"),
			"Timeout spans the OTLP endpoint accepted.", nil, nil),
		droppedDesc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "otlp_spans_dropped_total"),
			"Timeout reports never exported, by reason (queue_full: the bounded queues were full; export_failed: the endpoint refused or was unreachable after retries; shutdown: still queued at exit).",
			[]string{"reason"}, nil),
		queueDesc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "otlp_queue_length"),
			"Timeout reports and spans waiting for OTLP export.", nil, nil),
	}
}

func (c *sourceCollector) addLost(name string, total func() (uint64, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lost = append(c.lost, &lostSource{name: name, total: total})
}

func (c *sourceCollector) addMissed(name string, total func() (uint64, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.missed = append(c.missed, &lostSource{name: name, total: total})
}

func (c *sourceCollector) addSocks(event string, total func() (uint64, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.socks = append(c.socks, &lostSource{name: event, total: total})
}

func (c *sourceCollector) setOTLP(f func() OTLPStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.otlp = f
}

// Describe sends the descriptors.
func (c *sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lostDesc
	ch <- c.missedDesc
	ch <- c.socksDesc
	ch <- c.exportedDesc
	ch <- c.droppedDesc
	ch <- c.queueDesc
}

// Collect reads the sources. The lost-event and missed-run series of the two known
// sources are always present (zero until a collector registers), so that
// dashboards and alerts see them from the start.
func (c *sourceCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, src := range []struct {
		desc  *prometheus.Desc
		list  []*lostSource
		known []string
	}{{c.lostDesc, c.lost, []string{"tcp", "go"}}, {c.missedDesc, c.missed, []string{"tcp", "go"}}, {c.socksDesc, c.socks, []string{"full", "stale"}}} {
		sum := map[string]uint64{}
		for _, k := range src.known {
			sum[k] = 0
		}
		for _, s := range src.list {
			if v, err := s.total(); err == nil && v >= s.last {
				s.last = v
			}
			sum[s.name] += s.last
		}
		for name, v := range sum {
			ch <- prometheus.MustNewConstMetric(src.desc, prometheus.CounterValue, float64(v), name)
		}
	}
	var st OTLPStats
	if c.otlp != nil {
		st = c.otlp()
	}
	ch <- prometheus.MustNewConstMetric(c.exportedDesc, prometheus.CounterValue, float64(st.Exported))
	ch <- prometheus.MustNewConstMetric(c.droppedDesc, prometheus.CounterValue, float64(st.DroppedQueueFull), "queue_full")
	ch <- prometheus.MustNewConstMetric(c.droppedDesc, prometheus.CounterValue, float64(st.Failed), "export_failed")
	ch <- prometheus.MustNewConstMetric(c.droppedDesc, prometheus.CounterValue, float64(st.DroppedShutdown), "shutdown")
	ch <- prometheus.MustNewConstMetric(c.queueDesc, prometheus.GaugeValue, float64(st.Queued))
}
