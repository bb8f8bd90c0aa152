package event

// Any is one event of the time-ordered stream that correlate/ consumes and
// record/ stores: *TCP, *Deadline, *SockActivity, *Binding or *Local. The
// interface is sealed (its marker method is unexported) so a type switch over
// these five is complete; pointers keep a switch free of copies and allocations.
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
