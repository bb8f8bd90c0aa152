package event

import "time"

// Call is one outbound call seen by the call probes (net/http round trips):
// what the calling request's context allowed when it was made.
type Call struct {
	Mono   uint64 // CLOCK_MONOTONIC nanoseconds
	Time   time.Time
	PID    uint32
	Comm   string
	Goid   uint64
	Cookie uint64 // the connection's socket cookie, 0 when unresolved (e.g. TLS)
	Kind   string // "http"
	// HasDeadline is false when no deadline was above the call's context:
	// the call can wait forever.
	HasDeadline bool
	Deadline    time.Time
	// Remaining is the budget left when the call was made (negative: the
	// deadline had already passed).
	Remaining       time.Duration
	TraceID, SpanID string
	// Caller is "function (file:line)" of the first frame outside net/http
	// and context, for calls without a deadline.
	Caller string
	// End marks the end of the goroutine's call (the round trip
	// returned); only Mono, Time, PID, Comm, Goid and Kind are set.
	End bool
}

// MonoTime returns c.Mono.
func (c *Call) MonoTime() uint64 { return c.Mono }
