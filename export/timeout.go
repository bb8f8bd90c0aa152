package export

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/event"
)

// TimeoutJSON is the JSON form of a timeout report, one object per line.
// Field names are a contract: add fields, never rename them. Fields that
// need the detail probes are null when those were not attached.
type TimeoutJSON struct {
	Time     string   `json:"time"`
	Kind     string   `json:"kind"` // "timeout"
	PID      uint32   `json:"pid"`
	Comm     string   `json:"comm"`
	Outcome  string   `json:"outcome"` // "deadline_exceeded"
	Deadline string   `json:"deadline"`
	BudgetMs *float64 `json:"budget_ms"`
	// BudgetFrom says where budget_ms starts: "creation" (the detail tier
	// saw the deadline set), "client_timeout" (net/http's Client.Timeout,
	// the deadline being the one a client made from it, read at the
	// expiry), "timeout_handler" (an http.TimeoutHandler's duration,
	// likewise), "span_start" (the start of the span above
	// it in the context chain, read at the expiry: the request's whole
	// allowance as its span saw it) or "process_start" (the process's
	// start, when at most a minute before the deadline: a one-shot
	// program's whole allowance). The last two are upper bounds.
	BudgetFrom string   `json:"budget_from,omitempty"`
	ElapsedMs  *float64 `json:"elapsed_ms"`
	CreatedAt  *string  `json:"created_at"`
	Children   uint64   `json:"children"`
	Detail     bool     `json:"detail"`
	// Expiry is "timer_fired", or "expired_at_creation" when the deadline
	// was already past when it was set.
	Expiry string `json:"expiry"`
	// Timer: which of a deadline's two timers saw its expiry first, when
	// the library armed one beside the context's: "client_timeout"
	// (net/http's Client.Timeout over a RoundTripper not its own),
	// "grpc_server" (grpc-go's server, for the client's grpc-timeout),
	// "dial_deadline" (the socket deadline net's dial sets from its
	// context); absent for the context's own timer.
	Timer        string   `json:"timer,omitempty"`
	Goroutine    uint64   `json:"goroutine"`
	CreatedGoid  uint64   `json:"created_goroutine,omitempty"`
	CreatedStack []string `json:"created_stack,omitempty"`
	Context      string   `json:"context"` // address of the *timerCtx, for joining with other tools
	TraceID      string   `json:"trace_id"`
	SpanID       string   `json:"span_id"`
	TraceSource  string   `json:"trace_source"` // otel_context, http_traceparent, grpc_metadata, child_span, goroutine, or "" when none
	TraceSampled bool     `json:"trace_sampled,omitempty"`
	TraceNote    string   `json:"trace_note,omitempty"` // why there is no trace ID
	// Where the request was waiting when the deadline expired: a goroutine
	// parked on the context's Done channel, read at the expiry (no detail
	// probe needed). Absent when none was (docs/cli.md says when).
	WaitingAt string `json:"waiting_at,omitempty"`
	// CallerAt: the first frame of the waiting goroutine's stack outside
	// the runtime, the standard library's network packages and the RPC
	// libraries: the program's code whose call was waiting. Read at the
	// expiry, so present without the detail tier; often where the
	// deadline was set, which created_at says when the detail tier saw it.
	CallerAt     string   `json:"caller_at,omitempty"`
	WaitingGoid  uint64   `json:"waiting_goroutine,omitempty"`
	WaitingStack []string `json:"waiting_stack,omitempty"`
	Waiters      int      `json:"waiters,omitempty"` // goroutines parked on Done (at most 4 read)
	// The connections the waiters waited on, read at the expiry from a
	// frame of their stacks that holds one (socket cookies, as in
	// cause.connections[].cookie), and those frames: what binds a request to its
	// connection without the detail tier.
	WaitingConns  []uint64 `json:"waiting_conns,omitempty"`
	WaitingFrames []string `json:"waiting_frames,omitempty"`
	// Unwaited: the timer fired with nobody waiting on the context (read,
	// not unknown): it stopped no blocked call (an idle dial deadline
	// beside the call's own, say).
	Unwaited bool `json:"unwaited,omitempty"`
	// Cause is what the network (or the process) did to the request: the
	// correlator's verdict. Absent when only the Go side was traced.
	Cause *correlate.Cause `json:"cause,omitempty"`
	// Where the process runs, when the node agent knows it.
	ContainerID  string `json:"container_id,omitempty"`
	PodUID       string `json:"pod_uid,omitempty"`
	PodName      string `json:"pod_name,omitempty"`
	PodNamespace string `json:"pod_namespace,omitempty"`
}

// NewTimeoutJSON maps an expired deadline to its JSON form.
func NewTimeoutJSON(d *event.Deadline) TimeoutJSON {
	j := TimeoutJSON{
		Time:         d.Time.UTC().Format(time.RFC3339Nano),
		Kind:         "timeout",
		PID:          d.PID,
		Comm:         d.Comm,
		Outcome:      "deadline_exceeded",
		Deadline:     d.Deadline.UTC().Format(time.RFC3339Nano),
		Children:     d.Children,
		Detail:       d.Detail,
		Expiry:       d.Kind.String(),
		Goroutine:    d.Goid,
		Context:      fmt.Sprintf("%#x", d.Ctx),
		TraceID:      d.TraceID,
		SpanID:       d.SpanID,
		TraceSource:  d.TraceSource,
		TraceSampled: d.TraceSampled,
		TraceNote:    d.TraceNote,
	}
	if b, from, ok := d.BudgetFrom(); ok {
		j.BudgetMs, j.BudgetFrom = ms(b), from
	}
	if e, ok := d.Elapsed(); ok {
		j.ElapsedMs = ms(e)
	}
	switch {
	case d.ClientTimer:
		j.Timer = "client_timeout"
	case d.ServerTimer:
		j.Timer = "grpc_server"
	case d.DialTimer:
		j.Timer = "dial_deadline"
	}
	j.Unwaited = d.Unwaited()
	j.CallerAt = d.CallerAt()
	if d.WaitingAt != "" {
		j.WaitingAt, j.Waiters = d.WaitingAt, len(d.Waiters)
		for _, w := range d.Waiters {
			if w.At == d.WaitingAt {
				j.WaitingGoid, j.WaitingStack = w.Goid, w.Stack
				break
			}
		}
	}
	for _, w := range d.Waiters {
		if w.Conn != 0 {
			if !slices.Contains(j.WaitingConns, w.Conn) {
				j.WaitingConns = append(j.WaitingConns, w.Conn)
			}
			if !slices.Contains(j.WaitingFrames, w.ConnFrame) {
				j.WaitingFrames = append(j.WaitingFrames, w.ConnFrame)
			}
		}
	}
	if d.Detail {
		j.CreatedAt = &d.CreatedAt
		j.CreatedGoid = d.CreatedGoid
		j.CreatedStack = d.CreatedStack
	}
	return j
}

func ms(d time.Duration) *float64 {
	v := float64(d.Microseconds()) / 1000
	return &v
}

// NewReportJSON maps a correlated report to its JSON form: the timeout's
// fields plus cause.
func NewReportJSON(r *correlate.Report) TimeoutJSON {
	j := NewTimeoutJSON(&r.Deadline)
	c := r.Cause
	j.Cause = &c
	j.ContainerID, j.PodUID, j.PodName, j.PodNamespace = r.ContainerID, r.PodUID, r.PodName, r.PodNamespace
	return j
}

// MissingJSON is the line of an outbound call made under a context with no
// deadline at all (tracer trace --audit): it can wait forever.
type MissingJSON struct {
	Time      string `json:"time"`
	Kind      string `json:"kind"` // "deadline_missing"
	PID       uint32 `json:"pid"`
	Comm      string `json:"comm"`
	Call      string `json:"call"` // "http"
	Target    string `json:"target"`
	Caller    string `json:"caller"`
	Goroutine uint64 `json:"goroutine"`
	TraceID   string `json:"trace_id"`
	SpanID    string `json:"span_id"`
	Cookie    uint64 `json:"cookie,omitempty"`
}

// WriteMissing writes a deadline_missing line.
func (w *TimeoutWriter) WriteMissing(c *event.Call, target string) error {
	if w.format == FormatJSON {
		return w.enc.Encode(MissingJSON{Time: c.Time.UTC().Format(time.RFC3339Nano), Kind: "deadline_missing", PID: c.PID,
			Comm: c.Comm, Call: c.Kind, Target: target, Caller: c.Caller, Goroutine: c.Goid, TraceID: c.TraceID,
			SpanID: c.SpanID, Cookie: c.Cookie})
	}
	if target == "" {
		target = "?"
	}
	_, err := fmt.Fprintf(w.w, "-- %s deadline_missing pid %d: %s call to %s from %s has no deadline (trace %s)\n",
		c.Time.Local().Format("15:04:05.000"), c.PID, c.Kind, target, c.Caller, orDash(c.TraceID))
	return err
}

// HungJSON is the line of an outbound call with no deadline that is still
// waiting after --hang-after: what the field calls a hung call.
type HungJSON struct {
	MissingJSON
	WaitingMs float64 `json:"waiting_ms"`
	// Connection is the last kernel event of the call's connection: its
	// network state (null when the kernel reported nothing on it).
	Connection *TCPJSON `json:"connection"`
}

// WriteHung writes a hung_call line.
func (w *TimeoutWriter) WriteHung(c *event.Call, target string, waiting time.Duration, conn *event.TCP) error {
	if w.format == FormatJSON {
		j := HungJSON{MissingJSON: MissingJSON{Time: c.Time.Add(waiting).UTC().Format(time.RFC3339Nano), Kind: "hung_call", PID: c.PID,
			Comm: c.Comm, Call: c.Kind, Target: target, Caller: c.Caller, Goroutine: c.Goid, TraceID: c.TraceID,
			SpanID: c.SpanID, Cookie: c.Cookie}, WaitingMs: float64(waiting.Microseconds()) / 1000}
		if conn != nil {
			t := NewTCPJSON(conn)
			j.Connection = &t
		}
		return w.enc.Encode(j)
	}
	state := "no kernel event on its connection"
	if conn != nil {
		state = fmt.Sprintf("last kernel event %s (%s, srtt %s, rto %s)", conn.Kind, conn.State, fmtDur(conn.SRTT), fmtDur(conn.RTO))
	}
	_, err := fmt.Fprintf(w.w, "-- %s hung_call pid %d: %s call to %s from %s without a deadline, waiting %s: %s (trace %s)\n",
		c.Time.Add(waiting).Local().Format("15:04:05.000"), c.PID, c.Kind, orDash(target), c.Caller, fmtDur(waiting), state, orDash(c.TraceID))
	return err
}

// msOrDash writes a local figure, "-" when its source was not watching.
func msOrDash(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1fms", *v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// DetailJSON is the line printed when the detail probes are switched.
type DetailJSON struct {
	Time   string `json:"time"`
	Kind   string `json:"kind"` // "detail"
	PID    uint32 `json:"pid"`
	Detail bool   `json:"detail"`
	Reason string `json:"reason"`
}

// TimeoutWriter writes timeout reports and detail switches as a table or
// JSON lines.
type TimeoutWriter struct {
	format Format
	w      io.Writer
	enc    *json.Encoder
	header bool
}

// NewTimeoutWriter returns a writer for the format.
func NewTimeoutWriter(w io.Writer, f Format) *TimeoutWriter {
	return &TimeoutWriter{format: f, w: w, enc: json.NewEncoder(w)}
}

// WriteReport writes one correlated report.
func (w *TimeoutWriter) WriteReport(r *correlate.Report) error {
	if w.format == FormatJSON {
		return w.enc.Encode(NewReportJSON(r))
	}
	if err := w.Write(&r.Deadline); err != nil {
		return err
	}
	trace := r.Deadline.TraceID
	if trace == "" {
		trace = "-"
	}
	_, err := fmt.Fprintf(w.w, "              trace %s  cause %s (%s): %s\n", trace, r.Cause.Class, r.Cause.Confidence, r.Cause.Summary)
	if err == nil && r.Cause.Local != nil {
		l := r.Cause.Local
		_, err = fmt.Fprintf(w.w, "              local: throttled %s  runqueue %s  gc_pause %s  (of %.1f ms)\n",
			msOrDash(l.ThrottledMs), msOrDash(l.RunqueueMs), msOrDash(l.GCPauseMs), l.WindowMs)
	}
	if err == nil && (r.ContainerID != "" || r.PodUID != "") {
		pod := r.PodUID
		if r.PodName != "" {
			pod = r.PodNamespace + "/" + r.PodName
		}
		_, err = fmt.Fprintf(w.w, "              pod %s  container %.12s\n", pod, r.ContainerID)
	}
	return err
}

// Write writes one report.
func (w *TimeoutWriter) Write(d *event.Deadline) error {
	if w.format == FormatJSON {
		return w.enc.Encode(NewTimeoutJSON(d))
	}
	if !w.header {
		fmt.Fprintf(w.w, timeoutRow, "TIME", "PID", "COMM", "OUTCOME", "BUDGET", "ELAPSED", "CHILDREN", "CREATED AT")
		w.header = true
	}
	budget, elapsed, created := "?", "?", "? (detail probes were off)"
	if b, from, ok := d.BudgetFrom(); ok {
		budget = fmtDur(b)
		switch from {
		case "span_start":
			budget = "≤" + budget + " (span)"
		case "process_start":
			budget = "≤" + budget + " (process)"
		}
	}
	if e, ok := d.Elapsed(); ok {
		elapsed = fmtDur(e)
	}
	if d.Detail {
		created = d.CreatedAt
	}
	outcome := "deadline_exceeded"
	if d.Kind == event.ExpiredAtCreation {
		outcome = "already_past"
	}
	_, err := fmt.Fprintf(w.w, timeoutRow, d.Time.Local().Format("15:04:05.000"), fmt.Sprint(d.PID), d.Comm,
		outcome, budget, elapsed, fmt.Sprint(d.Children), created)
	return err
}

// Rows are written as they happen, so columns have fixed widths (a
// tabwriter would only align what it buffered).
const timeoutRow = "%-12s  %-7s  %-15s  %-17s  %8s  %8s  %8s  %s\n"

// WriteDetail writes a detail switch.
func (w *TimeoutWriter) WriteDetail(t time.Time, pid uint32, on bool, reason string) error {
	if w.format == FormatJSON {
		return w.enc.Encode(DetailJSON{Time: t.UTC().Format(time.RFC3339Nano), Kind: "detail", PID: pid, Detail: on, Reason: reason})
	}
	state := "off"
	if on {
		state = "on"
	}
	_, err := fmt.Fprintf(w.w, "-- %s detail probes %s for pid %d: %s\n", t.Local().Format("15:04:05.000"), state, pid, reason)
	return err
}
