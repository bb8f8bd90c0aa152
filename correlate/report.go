package correlate

import (
	"net/netip"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// Class is the cause of a timeout, from most to least specific.
type Class string

// The cause classes. Order matters: when a connection shows several kinds
// of trouble, the first one in this list names it.
const (
	ClassRTO            Class = "rto"             // the retransmission timer fired: data went unacknowledged
	ClassSynTimeout     Class = "syn_timeout"     // the handshake got no answer (SYN retries, connect ETIMEDOUT)
	ClassReset          Class = "reset"           // the connection was reset
	ClassRefused        Class = "refused"         // the connect was refused (RST on SYN, ECONNREFUSED)
	ClassZeroWindow     Class = "zero_window"     // the peer kept its receive window closed
	ClassFastRetransmit Class = "fast_retransmit" // losses repaired by fast (or other non-timer) retransmits
	ClassTLP            Class = "tlp"             // tail loss probes
	ClassSlowPeer       Class = "slow_peer"       // request sent on a healthy connection, no answer in time
	ClassSlowClient     Class = "slow_client"     // a server waited for its client's request (its next stream message, the rest of its body) on a healthy inbound connection, and it did not come in time
	ClassCPUThrottled   Class = "cpu_throttled"   // the cgroup's CPU quota ran out: the process was throttled for much of the budget
	ClassRunqueueDelay  Class = "runqueue_delay"  // the process's threads waited for a CPU for much of the budget
	ClassGCPause        Class = "gc_pause"        // the Go GC stopped the world for much of the budget
	ClassLocal          Class = "local"           // no network I/O during the context's life (pool, lock, queue), or the answer arrived in time and the process did not read it
	ClassUnknown        Class = "unknown"         // no cause could be established; the note says why
)

var classOrder = [...]Class{ClassRTO, ClassSynTimeout, ClassReset, ClassRefused, ClassZeroWindow,
	ClassFastRetransmit, ClassTLP, ClassSlowPeer, ClassSlowClient, ClassCPUThrottled, ClassRunqueueDelay, ClassGCPause, ClassLocal, ClassUnknown}

// Network reports whether the class blames the network.
func (c Class) Network() bool { return c.rank() < ClassSlowPeer.rank() }

// rank is the class's place in classOrder: lower is more specific.
func (c Class) rank() int {
	switch c {
	case ClassRTO:
		return 0
	case ClassSynTimeout:
		return 1
	case ClassReset:
		return 2
	case ClassRefused:
		return 3
	case ClassZeroWindow:
		return 4
	case ClassFastRetransmit:
		return 5
	case ClassTLP:
		return 6
	case ClassSlowPeer:
		return 7
	case ClassSlowClient:
		return 8
	case ClassCPUThrottled:
		return 9
	case ClassRunqueueDelay:
		return 10
	case ClassGCPause:
		return 11
	case ClassLocal:
		return 12
	case ClassUnknown:
		return 13
	}
	return 14
}

// Confidence says how the connections in a report were tied to the request.
type Confidence string

// The confidence levels.
const (
	// Exact: the connections were bound to the goroutine that created the
	// deadline, by a probe on its own I/O or on its outbound call.
	Exact Confidence = "exact"
	// Probable: inferred from what the process did in the window — a single
	// candidate connection, or (class local) no network I/O at all.
	Probable Confidence = "probable"
	// Ambiguous: several candidate connections; the class is what all of
	// them show, else unknown.
	Ambiguous Confidence = "ambiguous"
	// None: nothing tied the request to a connection (class unknown).
	None Confidence = "none"
)

// Report is the correlator's verdict on one expired deadline.
type Report struct {
	Deadline event.Deadline `json:"deadline"`
	Cause    Cause          `json:"cause"`
	// ContainerID and PodUID say where the process runs, when a node
	// agent knows it (the correlator leaves them empty; exporters put them
	// on spans and resources).
	ContainerID string `json:"container_id,omitempty"`
	PodUID      string `json:"pod_uid,omitempty"`
	// PodName and PodNamespace name the pod, when the node agent watches
	// the Kubernetes API.
	PodName      string `json:"pod_name,omitempty"`
	PodNamespace string `json:"pod_namespace,omitempty"`
}

// Cause explains a timeout.
type Cause struct {
	Class      Class      `json:"class"`
	Confidence Confidence `json:"confidence"`
	// Summary is one sentence a person can read, e.g. "3 RTOs to
	// 10.213.0.2:8080, rto 204→408→816 ms, srtt 0.1 ms".
	Summary string `json:"summary"`
	// Connections are the candidates the class was drawn from: those with
	// trouble first (most specific first), then in time order; at most
	// Config.MaxReportConnections (the note says when some were left out).
	Connections []Connection `json:"connections"`
	Window      Window       `json:"window"`
	// Note says how the verdict was reached (binding source, candidates,
	// approximations) and why, when the class is unknown.
	Note string `json:"note,omitempty"`
	// Local is the time the process lost to local causes during the
	// context's life, when a local source (cgroup CPU throttling, run-queue
	// delay, GC pauses) was watching the process; nil otherwise.
	Local *LocalTime `json:"local,omitempty"`
	// Unread is the answer the process held unread at the expiry on the
	// connection the request waited on (HTTP/1, HTTP/2, gRPC), when it
	// had received some; see unreadAnswer for when it makes the class.
	Unread *Unread `json:"answer_unread,omitempty"`
	// Delivered is the request's goroutine that had been handed its answer
	// before the expiry and had not run since (answerDelivered).
	Delivered *Delivered `json:"answer_delivered,omitempty"`
}

// LocalTime is what the process lost to itself or its node during a
// context's life, in milliseconds. A figure is null when its source was
// not watching the process (not attached, or no cgroup CPU limit to read).
type LocalTime struct {
	ThrottledMs *float64 `json:"throttled_ms"` // CFS throttling of the process's cgroup
	RunqueueMs  *float64 `json:"runqueue_ms"`  // mean time a thread of the process waited for a CPU
	GCPauseMs   *float64 `json:"gc_pause_ms"`  // Go stop-the-world pauses
	// GCPauseThrottledMs is the part of the GC pauses that overlapped the
	// cgroup's throttled time (present when > 0): it counts as throttling
	// when the rule compares the figures.
	GCPauseThrottledMs *float64 `json:"gc_pause_throttled_ms,omitempty"`
	gcThrottled        uint64
	// WindowMs is the span the figures cover: the context's life when its
	// creation was seen, else Config.LocalLookback before the expiry.
	WindowMs float64 `json:"window_ms"`
	// Approximate is true when the creation was not seen.
	Approximate bool `json:"approximate"`
}

// Window is the span of the context's life that was searched.
type Window struct {
	Start uint64 `json:"start_mono"` // creation, or expiry minus the lookback
	End   uint64 `json:"end_mono"`   // the expiry
	// Approximate is true when the creation was not seen (detail probes
	// off): the window is then the configured lookback before the expiry.
	Approximate bool `json:"approximate"`
}

// Connection is one socket that was a candidate, with what it showed in
// the window (events up to the grace window after the expiry count).
type Connection struct {
	Cookie uint64         `json:"cookie"`
	Local  netip.AddrPort `json:"local"`
	Peer   netip.AddrPort `json:"peer"`
	// Class is what this connection alone shows: a network class,
	// slow_peer when it was healthy, unknown when it cannot tell.
	Class Class `json:"class"`
	// Via says how it became a candidate: "binding:<source>" (exact),
	// "activity" or "tcp" (events of the process in the window).
	Via string `json:"via"`
	// Direction is "outbound" (this side connected: Peer is the server it
	// called), "inbound" (this side accepted: Peer is its caller), or
	// absent when the handshake was not seen (older than the tracer).
	Direction string `json:"direction,omitempty"`
	// Counts are the TCP events in the window by kind name ("rto", ...).
	Counts     map[string]int `json:"counts,omitempty"`
	Suppressed int            `json:"suppressed,omitempty"` // events the kernel rate limit dropped
	Sent       bool           `json:"sent,omitempty"`       // activity: the process sent in the window
	Received   bool           `json:"received,omitempty"`   // activity: the process received in the window
	// The socket's last snapshot at or before the end of the window.
	SRTTUs  int64  `json:"srtt_us"`
	RTOMs   int64  `json:"rto_ms"`
	Backoff uint8  `json:"backoff"`
	State   string `json:"state,omitempty"`
	// First and last event of the socket in the window: CLOCK_MONOTONIC,
	// and wall clock derived from the deadline's own pair of clocks.
	FirstMono uint64    `json:"first_mono,omitempty"`
	LastMono  uint64    `json:"last_mono,omitempty"`
	First     time.Time `json:"first,omitzero"`
	Last      time.Time `json:"last,omitzero"`
	// Events are the socket's TCP events in the window, oldest first: the
	// newest Config.MaxReportEvents; EventsOmitted says how many older ones
	// were left out (Counts include them).
	Events        []ConnEvent `json:"events,omitempty"`
	EventsOmitted int         `json:"events_omitted,omitempty"`
	// AtExpiry is the connection's send side as the expiry probe read it,
	// for a connection the request was waiting on; absent otherwise.
	AtExpiry *SendAtExpiry `json:"at_expiry,omitempty"`
}

// SendAtExpiry is a connection's send side when the deadline expired.
type SendAtExpiry struct {
	// UnackedBytes: what the process had written and not had
	// acknowledged, in flight or queued (0: everything acknowledged).
	UnackedBytes uint32 `json:"unacked_bytes"`
	// CAState is the kernel's congestion state: open, disorder, cwr,
	// recovery (repairing losses), loss (after a retransmission timeout).
	CAState string `json:"ca_state"`
	// RetransOut: segments retransmitted and not yet acknowledged;
	// LostOut: segments the kernel held lost.
	RetransOut uint32 `json:"retrans_out"`
	LostOut    uint32 `json:"lost_out"`
	// Recovering: data unacknowledged and the state recovery or loss —
	// the request was held up in loss recovery at the expiry.
	Recovering bool `json:"recovering,omitempty"`
	// TCPState is the socket's state then, as the kernel names it
	// (ESTABLISHED, SYN_SENT: still connecting, its one unacknowledged
	// byte its SYN); absent from recordings made before it was read.
	TCPState string `json:"tcp_state,omitempty"`
}

// ConnEvent is one kernel TCP event of a connection, as a timeline entry
// (an OTLP span event, say).
type ConnEvent struct {
	Kind string `json:"kind"` // event.TCPKind's name: "rto", "connect_failed", ...
	// AtAttach: not an event but the socket's state read from the kernel
	// (TCP_INFO) when the process was attached, for a connection older
	// than the tracer in trouble then: "rto" is data in RTO backoff (its
	// backoff, retransmits and RTO are the kernel's then),
	// "syn_retransmit" a connect whose SYN was retried, "zero_window" a
	// closed window being probed.
	AtAttach bool `json:"at_attach,omitempty"`
	// When: CLOCK_MONOTONIC, and wall clock derived from the deadline's
	// own pair of clocks (zero when the deadline has no wall time).
	Mono        uint64    `json:"mono"`
	Time        time.Time `json:"time,omitzero"`
	RTOMs       int64     `json:"rto_ms"` // the RTO armed at the event
	SRTTUs      int64     `json:"srtt_us"`
	Backoff     uint8     `json:"backoff"`
	Retransmits uint8     `json:"retransmits"`
	Error       string    `json:"error,omitempty"` // errno name of a failed connect or socket error
	// AfterExpiry: the event came after the deadline's timer fired (in
	// the grace window). A retransmit there still counts: it proves the
	// data or SYN was unacknowledged before the expiry (the kernel's
	// minimum RTO is 200 ms: a 200 ms deadline on a blackholed connection
	// sees its first RTO just after it). The cancellation's own effects
	// (a reset sent, a close) are listed, not causes.
	AfterExpiry bool `json:"after_expiry,omitempty"`
}
