package event

import (
	"slices"
	"strings"
	"time"
)

// ExpiryKind says how a Go context deadline expired.
type ExpiryKind uint8

// The expiry kinds; numbers match enum tt_go_expiry in bpf/include/go_event.h.
const (
	TimerFired        ExpiryKind = 1 // the deadline's timer fired
	ExpiredAtCreation ExpiryKind = 2 // the deadline was already past when it was set
)

// String returns a stable name.
func (k ExpiryKind) String() string {
	switch k {
	case TimerFired:
		return "timer_fired"
	case ExpiredAtCreation:
		return "expired_at_creation"
	}
	return "unknown"
}

// Deadline is one Go context deadline that expired in a traced process.
type Deadline struct {
	Time     time.Time // wall clock of the expiry
	Mono     uint64    // CLOCK_MONOTONIC nanoseconds of the expiry
	Kind     ExpiryKind
	PID      uint32
	TID      uint32
	Comm     string
	Goid     uint64    // goroutine running the expiry (the timer's own for fired timers)
	Ctx      uint64    // address of the *context.timerCtx: with PID, identifies the context while it lives
	Deadline time.Time // the deadline the context carried
	Children uint64    // contexts the expiry cancels directly (a parent's expiry takes its children down)
	// Cancelled: the program had cancelled the context when its timer fired,
	// after the deadline had passed (the call saw the deadline first, as a
	// socket deadline set from the context, and the caller cancelled before
	// the timer's goroutine ran). Still this deadline's expiry.
	Cancelled bool
	// ClientTimer: seen when net/http's own Client.Timeout timer fired, as
	// it closed the request's Cancel channel, before the context's timer
	// (a Client.Timeout over a RoundTripper that is not net/http's
	// Transport arms both, for one deadline; the first is reported). The
	// request was still waiting, as at the context's own expiry.
	ClientTimer bool
	// ServerTimer: seen when grpc-go's server deadline timer fired, as it
	// closed the stream, before the stream context's own timer (the server
	// arms both for the client's grpc-timeout; the first is reported). The
	// handler was still waiting, as at the context's own expiry.
	ServerTimer bool
	// DialTimer: seen when a dial's socket write deadline fired (net's
	// connect sets it to its context's deadline and waits writable in the
	// poller), before the context's own timer: when the socket's fires
	// first the dial returns "i/o timeout", and the program may exit or
	// cancel the context before the context's timer fires. The dial was
	// still waiting, as at the context's own expiry.
	DialTimer bool

	// The request the deadline belongs to: W3C trace and span ID (hex), or
	// empty. TraceSource says where they were found: "otel_context" (an
	// OpenTelemetry span above the deadline in its context chain) or
	// "http_traceparent" (the inbound header of the request the creating
	// goroutine was serving). TraceNote says why there is none.
	TraceID, SpanID string
	TraceSource     string
	TraceSampled    bool
	TraceNote       string

	// Filled only when the detail probes saw the deadline being set.
	Detail       bool
	CreatedMono  uint64    // CLOCK_MONOTONIC at creation
	Created      time.Time // wall clock at creation
	CreatedPC    uint64    // return address into the code that set the deadline
	CreatedAt    string    // "function (file:line)" of that code: the first frame outside package context
	CreatedStack []string  // the frames up from WithDeadlineCause's caller, innermost first
	CreatedGoid  uint64    // goroutine that set the deadline

	// Waiters are the goroutines parked on the context's Done channel when
	// its timer fired (a receive or a select on it: the request waiting for
	// its answer, a dial, a pool), read at the expiry with no detail probe;
	// at most four. WaitingAt is where the request was waiting: the
	// waiter that set the deadline when that is known, else the first.
	Waiters   []Waiter
	WaitingAt string // "function (file:line)"; empty when nobody waited on Done, or it could not be read
	// SpanStart is the start time of the span found above the deadline in
	// its context chain (zero: none, or its type records no start), read
	// at the expiry: the budget's start when the creation was not seen.
	SpanStart time.Time
	// ProcStart is when the process began (its fork: at or before its
	// exec), read at the expiry; zero when not read. Nothing the process
	// did, setting this deadline included, came before it.
	ProcStart time.Time
	// SetBudget is the duration the deadline was made from, read at the
	// expiry without its creation, and SetBudgetFrom where:
	// "client_timeout" (net/http's Client.Timeout, from a waiter's
	// (*Client).send frame) or "timeout_handler" (http.TimeoutHandler's,
	// from its ServeHTTP frame), each when the frame's request's context
	// is the deadline's parent; "dialer_timeout" (net.Dialer's Timeout,
	// from a waiter's DialContext frame, whose deferred cancel holds the
	// deadline). 0: not such a deadline, or not read.
	SetBudget     time.Duration
	SetBudgetFrom string

	// WaitersRead: the probe could read the waiters (the binary's layout
	// was known). With no waiter, a fired timer stopped nothing that was
	// blocked on it (Unwaited).
	WaitersRead bool
}

// Unwaited reports whether d's timer fired with nobody parked on its Done
// channel and no child context below it, while they could be read: an idle deadline
// (a dial's, kept until the program exits) expiring beside the one that
// stopped the call (grpc_health_probe, otel-cli: two reports per timeout,
// one of them unwaited).
func (d *Deadline) Unwaited() bool {
	// A context the program had cancelled already (http.Client.Timeout's
	// own timer goroutine cancels it as the context's timer fires) has
	// released its waiters: its waiters are not read.
	// Only a context with no children: the probe reads one level of them,
	// and a call can wait deeper (grpcurl's RPC waits two contexts below
	// its -max-time deadline).
	return d.WaitersRead && d.Kind == TimerFired && !d.Cancelled && d.Children == 0 && len(d.Waiters) == 0
}

// Waiter is one goroutine parked on an expiring context's Done channel.
type Waiter struct {
	Goid  uint64
	At    string   // its first frame outside the runtime: "function (file:line)"
	Stack []string // its frames, innermost first (runtime.gopark first)
	// The connection it waited on, read at the expiry from a waiting
	// frame in its stack (net/http's persistConn.roundTrip or readLoop,
	// an HTTP/2 client's roundTrip: their first argument holds it): the
	// socket's cookie, 0 when none was read or the socket had none yet;
	// ConnFrame is that function, empty when no such frame was found.
	Conn      uint64
	ConnFrame string
	// ConnFD is that connection's descriptor in the process, -1 (or 0 in
	// a Waiter built by hand) when the frame held no TCP connection the
	// probe could follow; set even when the socket had no cookie yet. Not
	// recorded: a descriptor names nothing once the process is gone.
	ConnFD int32
	// Woken: another case of the goroutine's select had won already when
	// the timer fired (a send or a close on another of its channels: for
	// a round trip, the response handed over), and the
	// goroutine had not run since: it was no longer waiting on the
	// context, only for a CPU.
	Woken bool

	// ConnUnread is how many bytes the connection had received and the
	// process had not read at the expiry (0: none, or not read).
	// ConnRcvAgo is how long at least it had been since the connection's
	// last data segment arrived (how long unread bytes had waited, at
	// least), and ConnSentAgo how long at most since the process last sent
	// data on it, both to the kernel's tick (0: not known, or less than a
	// tick). ConnAnswered:
	// the last segment in arrived after (or in the tick of) the last send,
	// an answer to what was sent; ConnAnsweredLater: in a later tick.
	ConnUnread        uint32
	ConnRcvAgo        time.Duration
	ConnSentAgo       time.Duration
	ConnAnswered      bool
	ConnAnsweredLater bool
	// ConnTLS: the connection was behind a wrapper (crypto/tls, grpc-go's
	// TLS credentials), not a bare TCP connection.
	ConnTLS bool
	// ConnSend is the connection's send side as the expiry probe read it
	// (nil when it read none).
	ConnSend *SendState
	// Creator: this is the goroutine that set the deadline (detail tier),
	// not parked on the context but in a waiting frame at the expiry (a
	// net/http handler reading its request body waits on its connection,
	// never on its context).
	Creator bool
	// AfterFunc: this waiter was found through the connection that an
	// AfterFunc registration among the context's children holds, not on
	// its Done channel, with no detail tier; the function that
	// registered it (net's (*netFD).connect since Go 1.26: a dial; pgx's
	// context watcher: a query). Its goroutine is the one parked on that
	// connection in the poller, with its stack; Readied: none was (a
	// dial readied by the socket deadline it set to the context's, not
	// run since): the connection only, no stack, and At names connect
	// without a line.
	AfterFunc string
	Readied   bool
}

// SendState is a connection's send side at an expiry, read from the
// socket by the expiry probe.
type SendState struct {
	// Unacked: the bytes the process had written and not had
	// acknowledged, sent or still queued (write_seq - snd_una).
	Unacked uint32
	// CAState is the congestion state (icsk_ca_state: CAOpen ... CALoss);
	// RetransOut the segments retransmitted and not yet acknowledged,
	// LostOut those the kernel held lost.
	CAState    uint8
	RetransOut uint32
	LostOut    uint32
	// State is the socket's TCP state (0: not read, recordings made
	// before it was).
	State TCPState
}

// Connecting: the socket had not finished its handshake at the expiry.
// Its one unacknowledged "byte" is then its SYN, not data the process
// wrote, and a loss state is the SYN's retransmission timer, not an RTO
// on data: CI once classed a request waiting on such a dial rto from it.
func (s *SendState) Connecting() bool {
	return s != nil && (s.State == TCPSynSent || s.State == TCPSynRecv)
}

// SynRetried: read at the expiry, the socket was still sending its SYN
// and had retransmitted it (the SYN's retransmission timer fired: loss,
// one segment retransmitted and unacknowledged): the SYN had gone
// unanswered for at least the initial RTO (1 s), whether or not the
// retransmit itself was seen.
func (s *SendState) SynRetried() bool {
	return s != nil && s.State == TCPSynSent && s.CAState == CALoss && s.RetransOut > 0
}

// The kernel's congestion states (enum tcp_ca_state).
const (
	CAOpen     = 0
	CADisorder = 1
	CACWR      = 2
	CARecovery = 3 // fast recovery: repairing losses found by duplicate ACKs or SACKs
	CALoss     = 4 // after a retransmission timeout
)

// CAStateName names a congestion state as the kernel's TCP_CA_* does.
func CAStateName(s uint8) string {
	switch s {
	case CAOpen:
		return "open"
	case CADisorder:
		return "disorder"
	case CACWR:
		return "cwr"
	case CARecovery:
		return "recovery"
	case CALoss:
		return "loss"
	}
	return "unknown"
}

// Settled: everything the process had written was acknowledged at the
// expiry (none in flight, none queued), so a retransmit after it repeats
// only what was written after it (the cancellation's own close).
func (s *SendState) Settled() bool { return s != nil && s.Unacked == 0 }

// Recovering: at the expiry the connection still had unacknowledged data
// and was repairing losses (fast recovery, or loss after an RTO): the
// request was held up in loss recovery then, whatever earlier
// retransmits had been acknowledged.
func (s *SendState) Recovering() bool {
	return s != nil && !s.Connecting() && s.Unacked > 0 && (s.CAState == CARecovery || s.CAState == CALoss)
}

// libraryFrames are the packages a waiting goroutine's stack passes
// through below the code that made the call: the runtime, the standard
// library's context, network, TLS and I/O packages, the RPC and HTTP/2
// libraries and OpenTelemetry's instrumentation.
var libraryFrames = []string{
	"runtime.", "internal/", "context.", "net.", "net/", "crypto/", "sync.", "io.", "bufio.", "time.", "os.", "syscall.",
	"google.golang.org/grpc", "golang.org/x/net/", "go.opentelemetry.io/",
}

// Caller is the first frame of w's stack outside libraryFrames: the
// program's own code whose call was waiting (the function that called
// http.Client.Do, a gRPC stub, a dial), often where the deadline was set;
// empty when every frame read is library code.
func (w *Waiter) Caller() string {
	for _, f := range w.Stack {
		lib := false
		for _, p := range libraryFrames {
			if strings.HasPrefix(f, p) {
				lib = true
				break
			}
		}
		if !lib {
			return f
		}
	}
	return ""
}

// CallerAt is the Caller of the waiter WaitingAt names: where the program
// made the call that was waiting when its deadline expired.
func (d *Deadline) CallerAt() string {
	if d.WaitingAt == "" {
		return ""
	}
	for i := range d.Waiters {
		if d.Waiters[i].At == d.WaitingAt {
			return d.Waiters[i].Caller()
		}
	}
	return ""
}

// WaitConns are the connections d's waiters waited on, read at the
// expiry (Waiter.Conn), each once, in the waiters' order.
func (d *Deadline) WaitConns() []uint64 {
	var out []uint64
	for _, w := range d.Waiters {
		if w.Conn != 0 && !slices.Contains(out, w.Conn) {
			out = append(out, w.Conn)
		}
	}
	return out
}

// Waiting picks WaitingAt from the waiters: the deadline's creator's,
// else the first waiter's in a connection's wait frame (a round trip, a
// stream's read: the call itself, where a watcher goroutine parked beside
// it, grpc-go's stream watcher or a program's own, is not where the
// request waited), else the first waiter's with a frame outside the
// runtime.
func (d *Deadline) Waiting() string {
	for _, w := range d.Waiters {
		if d.CreatedGoid != 0 && w.Goid == d.CreatedGoid && w.At != "" {
			return w.At
		}
	}
	for _, w := range d.Waiters {
		if w.ConnFrame != "" && w.At != "" {
			return w.At
		}
	}
	for _, w := range d.Waiters {
		if w.At != "" {
			return w.At
		}
	}
	return ""
}

// Budget is how long the context was given, when its creation was seen.
func (d *Deadline) Budget() (time.Duration, bool) {
	if !d.Detail {
		return 0, false
	}
	return d.Deadline.Sub(d.Created), true
}

// SpanBudget is the time from the start of the span found above the
// deadline in its context chain (SpanStart, an SDK recording span's) to the
// deadline: the request's whole allowance as its span saw it, which covers
// the deadline's budget (the span starts first, or with it). Known without
// the detail tier, when the span records its start.
func (d *Deadline) SpanBudget() (time.Duration, bool) {
	if d.SpanStart.IsZero() || d.SpanStart.After(d.Deadline) {
		return 0, false
	}
	return d.Deadline.Sub(d.SpanStart), true
}

// ProcessBudgetMax bounds ProcessBudget: a deadline further than this
// from its process's start says nothing useful about its budget.
const ProcessBudgetMax = time.Minute

// ProcessBudget is the time from the process's start (ProcStart) to the
// deadline, when at most ProcessBudgetMax: an upper bound of the
// deadline's budget (the process set it after it began), and close to it
// for a program that sets its deadline as it starts (a CLI, a one-shot
// job, an exec probe), whose creation no probe sees (it comes before any
// attach).
func (d *Deadline) ProcessBudget() (time.Duration, bool) {
	if d.ProcStart.IsZero() || d.ProcStart.After(d.Deadline) {
		return 0, false
	}
	b := d.Deadline.Sub(d.ProcStart)
	if b > ProcessBudgetMax {
		return 0, false
	}
	return b, true
}

// BudgetFrom is Budget when the creation was seen ("creation"), else the
// duration a deadline was made from, read at the expiry (SetBudgetFrom:
// "client_timeout", "timeout_handler", "dialer_timeout"), else SpanBudget
// ("span_start"), else ProcessBudget ("process_start"). The last two are
// upper bounds.
func (d *Deadline) BudgetFrom() (time.Duration, string, bool) {
	if b, ok := d.Budget(); ok {
		return b, "creation", true
	}
	if d.SetBudget > 0 && d.SetBudgetFrom != "" {
		return d.SetBudget, d.SetBudgetFrom, true
	}
	if b, ok := d.SpanBudget(); ok {
		return b, "span_start", true
	}
	if b, ok := d.ProcessBudget(); ok {
		return b, "process_start", true
	}
	return 0, "", false
}

// Late is how long after its deadline the context's timer fired: from the
// creation's monotonic clock and the budget when the creation was seen,
// else from the wall clocks of the deadline and of the expiry. False for a
// deadline that was already past when it was set.
func (d *Deadline) Late() (time.Duration, bool) {
	if d.Kind != TimerFired || d.Deadline.IsZero() {
		return 0, false
	}
	if b, ok := d.Budget(); ok && d.CreatedMono != 0 && d.CreatedMono <= d.Mono && b >= 0 {
		return max(time.Duration(d.Mono-d.CreatedMono)-b, 0), true
	}
	if d.Time.IsZero() {
		return 0, false
	}
	return max(d.Time.Sub(d.Deadline), 0), true
}

// Elapsed is the context's life from creation to expiry, when known.
func (d *Deadline) Elapsed() (time.Duration, bool) {
	if !d.Detail {
		return 0, false
	}
	return time.Duration(d.Mono - d.CreatedMono), true
}

// GoTime decodes a Go time.Time from its wall and ext words, as read from a
// traced process's memory (see the encoding in Go's time/time.go).
func GoTime(wall uint64, ext int64) time.Time {
	const (
		hasMonotonic   = 1 << 63
		nsecMask       = 1<<30 - 1
		nsecShift      = 30
		secondsPerDay  = 86400
		wallToInternal = (1884*365 + 1884/4 - 1884/100 + 1884/400) * secondsPerDay
		unixToInternal = (1969*365 + 1969/4 - 1969/100 + 1969/400) * secondsPerDay
	)
	nsec := int64(wall & nsecMask)
	var sec int64
	if wall&hasMonotonic != 0 {
		sec = wallToInternal + int64(wall<<1>>(nsecShift+1))
	} else {
		sec = ext
	}
	return time.Unix(sec-unixToInternal, nsec)
}
