package event

import "net/netip"

// SockActivity says that a socket of a process sent or received at Mono.
// It is coarse on purpose: the kernel side emits at most about one per
// second per socket (and at once when another goroutine takes the socket
// over), so it tells which sockets were in use when, not how much.
//
// The collector also delivers activity as a TCP event of kind TCPActivity;
// (*TCP).Activity converts one into the other.
type SockActivity struct {
	Mono        uint64 // CLOCK_MONOTONIC nanoseconds
	PID         uint32 // the process that did the I/O (the caller of send/recv)
	Cookie      uint64 // socket cookie: joins with TCP events
	Local, Peer netip.AddrPort
	Goid        uint64 // goroutine doing the I/O, for traced Go processes; 0 when unknown
	Sent        bool   // the process sent on the socket
	Received    bool   // the process received from the socket
}

// Activity returns the activity an event of kind TCPActivity carries, and
// false for every other kind.
func (e *TCP) Activity() (SockActivity, bool) {
	if e.Kind != TCPActivity {
		return SockActivity{}, false
	}
	return SockActivity{
		Mono: e.Mono, PID: e.PID, Cookie: e.Cookie, Local: e.Local, Peer: e.Peer,
		Goid: e.Goid, Sent: e.Sent, Received: !e.Sent,
	}, true
}

// The sources of a Binding.
const (
	// BindKernelG: the goroutine's own send/recv on the socket, read from the
	// g register in a kernel tracepoint (database and cache drivers).
	BindKernelG = "kernel_g"
	// BindHTTPRoundTrip: net/http wrote the goroutine's request to the
	// connection (persistConn round trip, HTTP/1 and HTTP/2).
	BindHTTPRoundTrip = "http_roundtrip"
	// BindGRPCStream: gRPC opened the goroutine's stream on the transport.
	BindGRPCStream = "grpc_stream"
	// BindDial: the socket was dialed under a context whose nearest
	// deadline the goroutine set (net/http dials on a goroutine of its own,
	// under the request's values), or, when that deadline's creation was
	// not seen, by the goroutine itself.
	BindDial = "dial"
)

// Binding says that the goroutine Goid of process PID did I/O on, or wrote
// its request to, socket Cookie at Mono. Unlike activity it is exact: it
// names the request's own connection, so the correlator trusts it over
// every process-wide guess.
type Binding struct {
	Mono   uint64 // CLOCK_MONOTONIC nanoseconds
	PID    uint32
	Goid   uint64
	Cookie uint64
	Source string // BindKernelG, BindHTTPRoundTrip, BindGRPCStream or BindDial
}

// RequestLevel reports whether the binding comes from a probe on an
// outbound call (HTTP round trip, gRPC stream, dial) rather than from the
// goroutine's own I/O. Those probes see every call a goroutine makes, so
// their presence for a process says that a goroutine without one made none.
func (b *Binding) RequestLevel() bool {
	switch b.Source {
	case BindHTTPRoundTrip, BindGRPCStream, BindDial:
		return true
	}
	return false
}
