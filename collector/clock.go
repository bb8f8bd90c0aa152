package collector

import (
	"bytes"
	"time"
)

// Clock turns the kernel's CLOCK_MONOTONIC timestamps into wall time and
// jiffies into durations.
type Clock struct {
	WallMinusMono time.Duration // wall - monotonic, measured once at start
	HZ            uint32        // the kernel's tick rate; 0: jiffies unknown
}

// NewClock measures the wall-monotonic offset now; hz converts jiffies.
func NewClock(hz uint32) Clock { return Clock{WallMinusMono: MonoOffset(), HZ: hz} }

// Wall is the wall time of a kernel timestamp.
func (c Clock) Wall(mono uint64) time.Time {
	return time.Unix(0, int64(mono)).Add(c.WallMinusMono)
}

// Jiffies is the duration of j ticks.
func (c Clock) Jiffies(j uint32) time.Duration {
	if c.HZ == 0 {
		return 0
	}
	return time.Duration(uint64(j) * uint64(time.Second) / uint64(c.HZ))
}

// CString is the NUL-terminated string at the start of b.
func CString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
