// Package tick puts the tracer's periodic wakeups on shared instants, and
// reads the monotonic clock every event is stamped with. It holds no
// kernel program: collectors, samplers and the pipeline all use it.
package tick

import (
	"math/rand/v2"
	"time"

	"golang.org/x/sys/unix"
)

// Every periodic wakeup of the tracer lands on the same instants: the
// multiples of its period on the wall clock, shifted by a per-process
// phase (every 100 ms instant is also a 50 ms one, every 1 s instant a
// 100 ms one). The Go runtime runs every
// timer that is due when it wakes, so timers due at one instant cost one
// wakeup of the process — and of the runtime's sysmon, which sleeps until
// the next timer when nothing runs — instead of one each. An idle
// `tracer trace` had a dozen periodic timers on their own phases: ~300
// context switches a second, over 40 % of them sysmon's.

// phase shifts this process's instants by a random part of a second:
// one process's timers still coincide (every instant is phase plus a
// multiple of its period), but a fleet of agents does not wake — and flush,
// and rescan — in step.
var phase = time.Duration(rand.Int64N(int64(time.Second)))

// Next is the first instant after now that is phase plus a multiple of
// d.
func Next(d time.Duration) time.Time {
	return time.Now().Add(-phase).Truncate(d).Add(d + phase)
}

// Ticker delivers the multiples of its period on C, like time.Ticker
// (a slow receiver misses instants, never gets a burst). Call Next after
// each receive from C to arm the following instant.
type Ticker struct {
	C <-chan time.Time
	t *time.Timer
	d time.Duration
}

// NewTicker starts a Ticker of period d, first firing at Next(d).
func NewTicker(d time.Duration) *Ticker {
	t := time.NewTimer(time.Until(Next(d)))
	return &Ticker{C: t.C, t: t, d: d}
}

// Next arms the ticker for the next multiple of its period.
func (k *Ticker) Next() { k.t.Reset(time.Until(Next(k.d))) }

// Reset changes the period and arms the ticker for its next multiple.
func (k *Ticker) Reset(d time.Duration) {
	k.d = d
	k.Next()
}

// Stop stops the ticker.
func (k *Ticker) Stop() { k.t.Stop() }

// Mono is CLOCK_MONOTONIC now, in nanoseconds: the clock of every event
// (bpf_ktime_get_ns in the kernel programs).
func Mono() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
