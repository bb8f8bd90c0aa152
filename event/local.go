package event

import (
	"fmt"
	"time"
)

// LocalKind says which local resource a process lost time to.
type LocalKind uint8

// The local kinds.
const (
	// LocalThrottled: the CFS bandwidth controller throttled the process's
	// cgroup (its CPU quota ran out): cgroup cpu.stat throttled time.
	LocalThrottled LocalKind = 1
	// LocalRunqueue: the process's threads were runnable but not running
	// (waiting for a CPU): scheduler tracepoints.
	LocalRunqueue LocalKind = 2
	// LocalGCPause: the Go garbage collector stopped the world.
	LocalGCPause LocalKind = 3
)

// String returns the stable name used in recordings and reports.
func (k LocalKind) String() string {
	switch k {
	case LocalThrottled:
		return "throttled"
	case LocalRunqueue:
		return "runqueue"
	case LocalGCPause:
		return "gc_pause"
	}
	return fmt.Sprintf("local(%d)", uint8(k))
}

// Valid reports whether k is one of the named kinds.
func (k LocalKind) Valid() bool { return k >= LocalThrottled && k <= LocalGCPause }

// ParseLocalKind is the inverse of String for the named kinds.
func ParseLocalKind(s string) (LocalKind, error) {
	for k := LocalThrottled; k <= LocalGCPause; k++ {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("local kind %q: unknown", s)
}

// Local says that process PID lost Lost of its time to a local cause
// between Start and Mono (CLOCK_MONOTONIC ns): an interval, not a point,
// because the sources sample or accumulate.
//
//   - LocalThrottled: the growth of the cgroup's throttled time between two
//     samples of cpu.stat; Count is the number of throttled periods.
//   - LocalRunqueue: the runnable-but-not-running time of the process's
//     threads in one accumulation interval, divided by the number of threads
//     that waited (the mean wait of a thread that wanted a CPU, so that a
//     process with many threads does not lose more than the wall clock);
//     Count is that number of threads, Total the sum before the division.
//   - LocalGCPause: one stop-the-world pause, Start to Mono; Lost is its
//     length; Count is 1.
//
// Lost is spread evenly over [Start, Mono] when a context's life covers
// only part of the interval.
type Local struct {
	Start uint64 // start of the interval (≤ Mono)
	Mono  uint64 // end of the interval: the stream's order
	PID   uint32
	Kind  LocalKind
	Lost  time.Duration
	Count uint32
	Total time.Duration // LocalRunqueue: the summed wait before the division; else 0
}

// MonoTime returns l.Mono, the end of the interval.
func (l *Local) MonoTime() uint64 { return l.Mono }

func (*Local) event() {}
