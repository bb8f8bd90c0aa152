// Package event holds the typed events that collector/ produces from the
// kernel and correlate/ and export/ consume. It is plain Go: it must not
// import cilium/ebpf, so everything downstream of the collector runs and is
// tested without root.
package event

import (
	"fmt"
	"net/netip"
	"syscall"
	"time"
)

// TCPKind says what happened on a socket. The numbers match enum tt_tcp_kind
// in bpf/include/tcp_event.h (recorded files use the names, see String).
type TCPKind uint8

// The TCP event kinds.
const (
	TCPRTO              TCPKind = 1  // retransmit in CA state Loss: the retransmission timer fired
	TCPFastRetransmit   TCPKind = 2  // retransmit in fast recovery (duplicate ACKs / SACK)
	TCPTLP              TCPKind = 3  // tail loss probe
	TCPSynRetransmit    TCPKind = 4  // SYN resent: the handshake gets no answer
	TCPRetransmit       TCPKind = 5  // other retransmit (e.g. RACK reordering in Open/Disorder)
	TCPResetReceived    TCPKind = 6  // the peer sent RST
	TCPResetSent        TCPKind = 7  // this host sent RST
	TCPConnectFailed    TCPKind = 8  // SYN_SENT -> CLOSE with an error (ETIMEDOUT, ECONNREFUSED, ...)
	TCPSocketError      TCPKind = 9  // a connected socket reported an error
	TCPZeroWindow       TCPKind = 10 // the zero-window probe timer fired: the peer's window is closed
	TCPSynAckRetransmit TCPKind = 11 // server side: SYN-ACK resent
	TCPConnectAborted   TCPKind = 12 // SYN_SENT -> CLOSE without error: the application gave up
	TCPConnect          TCPKind = 13 // lifecycle: connect started
	TCPEstablished      TCPKind = 14 // lifecycle: handshake completed
	TCPClose            TCPKind = 15 // lifecycle: connection closed
	TCPActivity         TCPKind = 16 // the owner sent or received (coarse: at most once per interval per socket, and when another goroutine takes over)
	TCPClosing          TCPKind = 17 // lifecycle: this side closed a connected socket (ESTABLISHED -> FIN_WAIT1, CLOSE_WAIT -> LAST_ACK)
	// TCPRetransmitAcked: everything sent before the socket's last
	// retransmit is acknowledged (noticed at the owner's next send or
	// receive, so the ACK came at or before the event; tp_btf only).
	TCPRetransmitAcked TCPKind = 18
)

var tcpKindNames = [...]string{
	TCPRTO:              "rto",
	TCPFastRetransmit:   "fast_retransmit",
	TCPTLP:              "tlp",
	TCPSynRetransmit:    "syn_retransmit",
	TCPRetransmit:       "retransmit",
	TCPResetReceived:    "reset_received",
	TCPResetSent:        "reset_sent",
	TCPConnectFailed:    "connect_failed",
	TCPSocketError:      "socket_error",
	TCPZeroWindow:       "zero_window",
	TCPSynAckRetransmit: "synack_retransmit",
	TCPConnectAborted:   "connect_aborted",
	TCPConnect:          "connect",
	TCPEstablished:      "established",
	TCPClose:            "close",
	TCPActivity:         "activity",
	TCPClosing:          "closing",
	TCPRetransmitAcked:  "retransmit_acked",
}

// String returns the kind's stable name, as used in JSON and metrics.
func (k TCPKind) String() string {
	if int(k) < len(tcpKindNames) && tcpKindNames[k] != "" {
		return tcpKindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is a known kind.
func (k TCPKind) Valid() bool {
	return int(k) < len(tcpKindNames) && tcpKindNames[k] != ""
}

// ParseTCPKind is the inverse of String.
func ParseTCPKind(s string) (TCPKind, error) {
	for k, name := range tcpKindNames {
		if name != "" && name == s {
			return TCPKind(k), nil
		}
	}
	return 0, fmt.Errorf("unknown TCP event kind %q", s)
}

// Retransmit reports whether the kind is a retransmission of some class.
func (k TCPKind) Retransmit() bool {
	switch k {
	case TCPRTO, TCPFastRetransmit, TCPTLP, TCPSynRetransmit, TCPRetransmit, TCPSynAckRetransmit:
		return true
	}
	return false
}

// Lifecycle reports whether the kind only marks a connection's life
// (connect, established, closing, close) rather than trouble.
func (k TCPKind) Lifecycle() bool {
	return k == TCPConnect || k == TCPEstablished || k == TCPClose || k == TCPClosing
}

// TCPState is a kernel TCP state (include/net/tcp_states.h).
type TCPState uint8

// The states the correlator tells apart by name.
const (
	TCPSynSent TCPState = 2
	TCPSynRecv TCPState = 3
)

var tcpStateNames = [...]string{
	1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
	6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN",
	11: "CLOSING", 12: "NEW_SYN_RECV", 13: "BOUND_INACTIVE",
}

// String returns the kernel's name of the state.
func (s TCPState) String() string {
	if int(s) < len(tcpStateNames) && tcpStateNames[s] != "" {
		return tcpStateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// CAState is the congestion-avoidance state (enum tcp_ca_state).
type CAState uint8

var caStateNames = [...]string{"open", "disorder", "cwr", "recovery", "loss"}

// String returns a lower-case name of the state.
func (s CAState) String() string {
	if int(s) < len(caStateNames) {
		return caStateNames[s]
	}
	return fmt.Sprintf("ca(%d)", uint8(s))
}

// TCP is one kernel TCP event with a snapshot of its socket.
type TCP struct {
	Time time.Time // wall clock, from the kernel's monotonic timestamp
	Mono uint64    // CLOCK_MONOTONIC nanoseconds, for ordering and joins
	Kind TCPKind

	PID      uint32 // owning process (tgid); 0 when unknown
	Comm     string // owner's command name
	CgroupID uint64 // owner's cgroup v2 id
	NetNS    uint32 // network namespace inode
	Cookie   uint64 // socket cookie: joins events of one socket

	Local, Peer netip.AddrPort
	State       TCPState // state at the event (new state for state changes)
	OldState    TCPState // previous state, for state changes
	CAState     CAState

	SRTT        time.Duration // smoothed RTT
	RTTVar      time.Duration // RTT mean deviation
	RTO         time.Duration // retransmission timeout currently armed
	Backoff     uint8         // icsk_backoff: exponential backoff steps of the RTO
	Retransmits uint8         // icsk_retransmits: unanswered timeouts in a row
	Errno       syscall.Errno // error of connect_failed/socket_error; retransmit error

	Cwnd         uint32 // congestion window, segments
	RetransOut   uint32 // retransmitted segments in flight
	LostOut      uint32 // segments marked lost
	TotalRetrans uint32 // retransmits over the socket's life
	SndWnd       uint32 // peer's advertised window, bytes

	Suppressed uint32 // earlier events of this socket dropped by the kernel rate limit

	// Activity events only.
	Goid uint64 // the goroutine doing the I/O, for traced Go processes (0: unknown)
	Sent bool   // true for a send, false for a receive

	// AtAttach: not a kernel event but the socket's state read from the
	// kernel (TCP_INFO) when its process was attached, for a connection
	// older than the tracer that was in trouble then: Kind is rto for
	// data in RTO backoff (CA state Loss, unacknowledged segments),
	// syn_retransmit for a connect whose SYN was retried, zero_window for
	// a closed peer window being probed. Backoff, Retransmits, RTO, SRTT,
	// LostOut, RetransOut and TotalRetrans are the kernel's at that time.
	AtAttach bool
}

// ErrnoName returns the symbolic name of the event's errno ("ETIMEDOUT"),
// or "" when there is none.
func (e *TCP) ErrnoName() string {
	if e.Errno == 0 {
		return ""
	}
	if n, ok := errnoNames[e.Errno]; ok {
		return n
	}
	return fmt.Sprintf("errno %d", int(e.Errno))
}

var errnoNames = map[syscall.Errno]string{
	syscall.ETIMEDOUT:    "ETIMEDOUT",
	syscall.ECONNREFUSED: "ECONNREFUSED",
	syscall.ECONNRESET:   "ECONNRESET",
	syscall.ECONNABORTED: "ECONNABORTED",
	syscall.EHOSTUNREACH: "EHOSTUNREACH",
	syscall.ENETUNREACH:  "ENETUNREACH",
	syscall.EPIPE:        "EPIPE",
	syscall.ENOBUFS:      "ENOBUFS",
	syscall.ENOMEM:       "ENOMEM",
	syscall.EAGAIN:       "EAGAIN",
	syscall.EHOSTDOWN:    "EHOSTDOWN",
	syscall.EPROTO:       "EPROTO",
}
