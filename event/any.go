package event

// Any is one event of the time-ordered stream that correlate/ consumes and
// record/ stores: *TCP, *Deadline, *SockActivity, *Binding, *Local, *Call or
// *Mark. The interface is sealed (its marker method is unexported) so a type
// switch over these seven is complete; pointers keep a switch free of copies and allocations.
type Any interface {
	// MonoTime is the event's CLOCK_MONOTONIC time in nanoseconds: the
	// stream's order.
	MonoTime() uint64
	event()
}

// MonoTime returns e.Mono.
func (e *TCP) MonoTime() uint64 { return e.Mono }

// MonoTime returns d.Mono, the expiry.
func (d *Deadline) MonoTime() uint64 { return d.Mono }

// MonoTime returns a.Mono.
func (a *SockActivity) MonoTime() uint64 { return a.Mono }

// MonoTime returns b.Mono.
func (b *Binding) MonoTime() uint64 { return b.Mono }

func (*TCP) event()          {}
func (*Deadline) event()     {}
func (*SockActivity) event() {}
func (*Binding) event()      {}
func (*Call) event()         {}
func (*Mark) event()         {}

// Mark says that the stream has no more events before Mono: time passed
// while nothing happened. The live pipeline records one at its end (and
// `tracer replay` advances to it), so that what depends on time passing —
// a hung call, a report's grace window — comes out of a replay as it came
// out live.
type Mark struct {
	Mono uint64
}

// MonoTime returns m.Mono.
func (m *Mark) MonoTime() uint64 { return m.Mono }
