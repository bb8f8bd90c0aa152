package export

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/event"
)

// spanPlan is the span a report becomes, as plain data: built without the
// SDK so that the mapping is tested on its own, and applied by OTLP.emit.
type spanPlan struct {
	name       string
	start, end time.Time
	// The request's trace; parent is the span current when the deadline
	// was created (or the child span, see event.Deadline.TraceSource).
	traceID   trace.TraceID
	parent    trace.SpanID
	hasTrace  bool
	hasParent bool
	sampled   bool
	attrs     []attribute.KeyValue
	events    []spanEvent
	status    string
}

type spanEvent struct {
	name  string
	at    time.Time
	attrs []attribute.KeyValue
}

// unknownStart is the length of the span of a deadline whose creation was
// not seen (detail probes off): a short span that ends at the expiry.
const unknownStart = time.Millisecond

// maxSpanEvents is the SDK's default limit on events per span.
const maxSpanEvents = 128

// Span attribute keys. The OpenTelemetry semantic conventions where one
// exists (network.*, process.*, code.*, container.id, k8s.pod.uid), else
// ours under timeout.* and tcp.*.
const (
	attrEventType   = "event.type"
	attrCause       = "timeout.cause"
	attrExpiry      = "timeout.expiry"
	attrDeadline    = "timeout.deadline"
	attrDetail      = "timeout.detail"
	attrDurationMs  = "timeout.duration_ms"
	attrBudgetMs    = "timeout.budget_ms"
	attrBudgetFrom  = "timeout.budget_from"
	attrChildren    = "timeout.children"
	attrClass       = "timeout.class"
	attrConfidence  = "timeout.confidence"
	attrSummary     = "timeout.summary"
	attrNote        = "timeout.note"
	attrTraceSource = "timeout.trace_source"
	attrTraceNote   = "timeout.trace_note"
	attrGoroutine   = "timeout.goroutine"
	attrWaitingAt   = "timeout.waiting_at"
	attrCallerAt    = "timeout.caller_at"
	attrPeerAddr    = "network.peer.address"
	attrPeerPort    = "network.peer.port"
	// server.* name the upstream a client connection called: set only
	// when this side's connect was seen (Connection.Direction outbound),
	// never for a server's caller.
	attrServerAddr = "server.address"
	attrServerPort = "server.port"
	attrLocalAddr  = "network.local.address"
	attrLocalPort  = "network.local.port"
	attrTransport  = "network.transport"
	attrPID        = "process.pid"
	attrExecutable = "process.executable.name"
	// The code.* names of semantic conventions 1.30 and later; the older
	// ones (code.function, code.filepath, code.lineno) are still set, for
	// the queries and dashboards that read them.
	attrCodeFunctionName = "code.function.name"
	attrCodeFilePath     = "code.file.path"
	attrCodeLineNumber   = "code.line.number"
	attrCodeFunction     = "code.function"
	attrCodeFile         = "code.filepath"
	attrCodeLine         = "code.lineno"
	// attrRetransmitType is the proposed network.tcp.retransmit.type, on
	// the span events of retransmits it has a value for.
	attrRetransmitType  = "network.tcp.retransmit.type"
	attrContainerID     = "container.id"
	attrPodUID          = "k8s.pod.uid"
	attrPodName         = "k8s.pod.name"
	attrNamespace       = "k8s.namespace.name"
	attrConnections     = "tcp.connections"
	attrRTOCount        = "tcp.rto_count"
	attrRetransmits     = "tcp.retransmits"
	attrFastRetransmits = "tcp.fast_retransmits"
	attrTLPCount        = "tcp.tlp_count"
	attrSynRetransmits  = "tcp.syn_retransmits"
	attrResets          = "tcp.resets"
	attrConnectFailures = "tcp.connect_failures"
	attrZeroWindow      = "tcp.zero_window_probes"
	attrSuppressed      = "tcp.suppressed"
	attrSRTTMs          = "tcp.srtt_ms"
	attrRTOMs           = "tcp.rto_ms"
	attrBackoff         = "tcp.backoff"
	attrTCPState        = "tcp.state"
	attrCookie          = "tcp.socket_cookie"
	attrEventsOmitted   = "tcp.events_omitted"
	attrError           = "error.type"
	attrLocalThrottled  = "timeout.local.throttled_ms"
	attrLocalRunqueue   = "timeout.local.runqueue_ms"
	attrLocalGCPause    = "timeout.local.gc_pause_ms"
	attrLocalWindow     = "timeout.local.window_ms"
	// The answer the process held at the expiry (cause.answer_unread,
	// cause.answer_delivered): "unread" or "delivered", and its figures.
	attrAnswerHeld     = "timeout.answer.held"
	attrAnswerBytes    = "timeout.answer.unread_bytes"
	attrAnswerUnreadMs = "timeout.answer.unread_ms"
	attrAnswerPeerMs   = "timeout.answer.peer_ms"
)

// causeContextDeadline is timeout.cause of every report: the reported
// context's own timer expired (a parent's expiry is reported once, on the
// parent, with timeout.children counting the contexts it took down).
const causeContextDeadline = "context_deadline"

// errorTypeTimeout is the span's error.type.
const errorTypeTimeout = "timeout"

// retransmitType is the proposed network.tcp.retransmit.type of a kernel
// event kind, "" for kinds it has no value for.
func retransmitType(kind string) string {
	switch kind {
	case "rto":
		return "timeout"
	case "fast_retransmit":
		return "fast"
	case "tlp":
		return "tail_loss_probe"
	}
	return ""
}

// planSpan maps a report to its span.
func planSpan(r *correlate.Report, p Process) spanPlan {
	d := &r.Deadline
	sp := spanPlan{name: "deadline exceeded", end: d.Time, status: "context deadline exceeded"}
	if sp.end.IsZero() {
		sp.end = time.Now()
	}
	fn, file, line := splitCreatedAt(d)
	if fn != "" {
		sp.name += ": " + fn
	}
	sp.start = sp.end.Add(-unknownStart)
	if d.Detail && !d.Created.IsZero() && !d.Created.After(sp.end) {
		sp.start = d.Created
	}
	if tid, err := trace.TraceIDFromHex(d.TraceID); err == nil && tid.IsValid() {
		sp.traceID, sp.hasTrace, sp.sampled = tid, true, d.TraceSampled
		if sid, err := trace.SpanIDFromHex(d.SpanID); err == nil && sid.IsValid() {
			sp.parent, sp.hasParent = sid, true
		}
	}

	a := []attribute.KeyValue{
		attribute.String(attrEventType, "timeout"),
		attribute.String(attrCause, causeContextDeadline),
		attribute.String(attrExpiry, d.Kind.String()),
		attribute.String(attrDeadline, d.Deadline.UTC().Format(time.RFC3339Nano)),
		attribute.Bool(attrDetail, d.Detail),
		attribute.Int64(attrChildren, int64(d.Children)),
		attribute.String(attrClass, string(r.Cause.Class)),
		attribute.String(attrConfidence, string(r.Cause.Confidence)),
		attribute.String(attrSummary, r.Cause.Summary),
		attribute.Int64(attrPID, int64(d.PID)),
		attribute.String(attrExecutable, p.Executable),
		attribute.Int64(attrGoroutine, int64(d.Goid)),
	}
	if b, from, ok := d.BudgetFrom(); ok {
		a = append(a, attribute.Float64(attrBudgetMs, millis(b)), attribute.String(attrBudgetFrom, from))
	}
	if e, ok := d.Elapsed(); ok {
		a = append(a, attribute.Float64(attrDurationMs, millis(e)))
	}
	if r.Cause.Note != "" {
		a = append(a, attribute.String(attrNote, r.Cause.Note))
	}
	if sp.hasTrace {
		a = append(a, attribute.String(attrTraceSource, d.TraceSource))
	} else if d.TraceNote != "" {
		a = append(a, attribute.String(attrTraceNote, d.TraceNote))
	}
	if c := d.CallerAt(); c != "" {
		a = append(a, attribute.String(attrCallerAt, c))
	}
	if d.WaitingAt != "" {
		a = append(a, attribute.String(attrWaitingAt, d.WaitingAt))
	}
	if fn != "" {
		a = append(a, attribute.String(attrCodeFunctionName, fn), attribute.String(attrCodeFunction, fn))
	}
	if file != "" {
		a = append(a, attribute.String(attrCodeFilePath, file), attribute.String(attrCodeFile, file))
	}
	if line > 0 {
		a = append(a, attribute.Int(attrCodeLineNumber, line), attribute.Int(attrCodeLine, line))
	}
	// The span is the failure itself: error.type, as semantic conventions
	// put it on failed operations, with their own example value.
	a = append(a, attribute.String(attrError, errorTypeTimeout))
	if p.ContainerID != "" {
		a = append(a, attribute.String(attrContainerID, p.ContainerID))
	}
	if p.PodUID != "" {
		a = append(a, attribute.String(attrPodUID, p.PodUID))
	}
	a = append(a, localAttrs(r.Cause.Local)...)
	a = append(a, answerAttrs(&r.Cause)...)
	a = append(a, attribute.Int(attrConnections, len(r.Cause.Connections)))
	if len(r.Cause.Connections) > 0 {
		a = append(a, connectionAttrs(&r.Cause.Connections[0])...)
	}
	sp.attrs = a
	sp.events = timelineEvents(r.Cause.Connections)
	if n := countEvents(r.Cause.Connections) - len(sp.events); n > 0 {
		sp.attrs = append(sp.attrs, attribute.Int(attrEventsOmitted, n))
	}
	return sp
}

// localAttrs are the local time lost; a figure whose source was not
// watching is left out (never 0).
func localAttrs(l *correlate.LocalTime) []attribute.KeyValue {
	if l == nil {
		return nil
	}
	a := []attribute.KeyValue{attribute.Float64(attrLocalWindow, l.WindowMs)}
	for _, f := range []struct {
		key string
		v   *float64
	}{{attrLocalThrottled, l.ThrottledMs}, {attrLocalRunqueue, l.RunqueueMs}, {attrLocalGCPause, l.GCPauseMs}} {
		if f.v != nil {
			a = append(a, attribute.Float64(f.key, *f.v))
		}
	}
	return a
}

// answerAttrs describe the answer the process held at the expiry, when a
// rule found one (correlate.Unread, correlate.Delivered).
func answerAttrs(c *correlate.Cause) []attribute.KeyValue {
	switch {
	case c.Delivered != nil:
		return []attribute.KeyValue{attribute.String(attrAnswerHeld, "delivered"), attribute.Float64(attrAnswerPeerMs, c.Delivered.PeerMs)}
	case c.Unread != nil:
		return []attribute.KeyValue{attribute.String(attrAnswerHeld, "unread"), attribute.Int64(attrAnswerBytes, int64(c.Unread.Bytes)),
			attribute.Float64(attrAnswerUnreadMs, c.Unread.ForMs)}
	}
	return nil
}

// connectionAttrs describes the first connection: the one the class was
// drawn from (the report lists trouble first).
func connectionAttrs(c *correlate.Connection) []attribute.KeyValue {
	a := []attribute.KeyValue{attribute.String(attrTransport, "tcp")}
	a = append(a, peerAttrs(c)...)
	if c.Local.IsValid() {
		a = append(a, attribute.String(attrLocalAddr, c.Local.Addr().Unmap().String()), attribute.Int(attrLocalPort, int(c.Local.Port())))
	}
	n := c.Counts
	retrans := 0
	for k, v := range n {
		if kind, err := event.ParseTCPKind(k); err == nil && kind.Retransmit() {
			retrans += v
		}
	}
	a = append(a,
		attribute.Int(attrRTOCount, n["rto"]),
		attribute.Int(attrRetransmits, retrans),
		attribute.Int(attrFastRetransmits, n["fast_retransmit"]),
		attribute.Int(attrTLPCount, n["tlp"]),
		attribute.Int(attrSynRetransmits, n["syn_retransmit"]),
		attribute.Int(attrResets, n["reset_received"]+n["reset_sent"]),
		attribute.Int(attrConnectFailures, n["connect_failed"]),
		attribute.Int(attrZeroWindow, n["zero_window"]),
		attribute.Int(attrSuppressed, c.Suppressed),
		attribute.Float64(attrSRTTMs, float64(c.SRTTUs)/1000),
		attribute.Int64(attrRTOMs, c.RTOMs),
		attribute.Int(attrBackoff, int(c.Backoff)),
		attribute.String(attrCookie, "0x"+strconv.FormatUint(c.Cookie, 16)),
	)
	if c.State != "" {
		a = append(a, attribute.String(attrTCPState, c.State))
	}
	return a
}

func peerAttrs(c *correlate.Connection) []attribute.KeyValue {
	if !c.Peer.IsValid() {
		return nil
	}
	a := []attribute.KeyValue{
		attribute.String(attrPeerAddr, c.Peer.Addr().Unmap().String()),
		attribute.Int(attrPeerPort, int(c.Peer.Port())),
	}
	if c.Direction == "outbound" {
		a = append(a, attribute.String(attrServerAddr, c.Peer.Addr().Unmap().String()), attribute.Int(attrServerPort, int(c.Peer.Port())))
	}
	return a
}

// timelineEvents makes one span event per TCP event of the connections, at
// its kernel time, in time order across connections; at most
// maxSpanEvents (the newest).
func timelineEvents(conns []correlate.Connection) []spanEvent {
	var out []spanEvent
	for i := range conns {
		c := &conns[i]
		for _, e := range c.Events {
			a := []attribute.KeyValue{
				attribute.Int64(attrRTOMs, e.RTOMs),
				attribute.Float64(attrSRTTMs, float64(e.SRTTUs)/1000),
				attribute.Int(attrBackoff, int(e.Backoff)),
				attribute.Int(attrRetransmits, int(e.Retransmits)),
				attribute.String(attrCookie, "0x"+strconv.FormatUint(c.Cookie, 16)),
			}
			a = append(a, peerAttrs(c)...)
			if rt := retransmitType(e.Kind); rt != "" {
				a = append(a, attribute.String(attrRetransmitType, rt))
			}
			if e.Error != "" {
				a = append(a, attribute.String(attrError, e.Error))
			}
			out = append(out, spanEvent{name: "tcp." + e.Kind, at: e.Time, attrs: a})
		}
	}
	slices.SortStableFunc(out, func(a, b spanEvent) int { return a.at.Compare(b.at) })
	if len(out) > maxSpanEvents {
		out = out[len(out)-maxSpanEvents:]
	}
	return out
}

func countEvents(conns []correlate.Connection) int {
	n := 0
	for i := range conns {
		n += len(conns[i].Events) + conns[i].EventsOmitted
	}
	return n
}

// splitCreatedAt splits "function (file:line)" into its parts.
func splitCreatedAt(d *event.Deadline) (fn, file string, line int) {
	if !d.Detail || d.CreatedAt == "" {
		return "", "", 0
	}
	fn, loc, ok := strings.Cut(d.CreatedAt, " (")
	if !ok {
		return d.CreatedAt, "", 0
	}
	loc = strings.TrimSuffix(loc, ")")
	if i := strings.LastIndexByte(loc, ':'); i >= 0 {
		if n, err := strconv.Atoi(loc[i+1:]); err == nil {
			return fn, loc[:i], n
		}
	}
	return fn, loc, 0
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
