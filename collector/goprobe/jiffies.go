package goprobe

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/timeout-tracer/tracer/collector"
)

// The kernel's tick (1/HZ), which the socket's receive timestamps
// (icsk_ack.lrcvtime, lsndtime) count in. The kernel does not export HZ
// (sysconf's CLK_TCK is USER_HZ, 100 whatever HZ is), and the config file
// is not on every node; the expiry event carries bpf_jiffies64() and the
// monotonic clock at the same instant, and on a 64-bit kernel jiffies start
// at INITIAL_JIFFIES, (unsigned int)(-300*HZ), when the monotonic clock
// starts at 0: jiffies - 2^32 = HZ * (seconds since boot - 300). The HZ
// values Linux allows are tried; one that predicts jiffies within two
// seconds' worth of ticks (the clocks start a moment apart at boot) is it.
// In the first minutes after boot (the predictions too close together)
// none is chosen and the tick stays unknown.
var hzCandidates = []uint64{100, 250, 300, 1000, 24, 32, 48, 64, 128, 200, 256, 512, 1024, 1200}

// kernelTick is the tick once derived (as nanoseconds), 0 before.
var kernelTick atomic.Int64

func tickOf(jiffies, monoNs uint64) time.Duration {
	if t := kernelTick.Load(); t != 0 {
		return time.Duration(t)
	}
	hz := hzOf(jiffies, monoNs)
	if hz == 0 {
		return 0
	}
	t := time.Second / time.Duration(hz)
	kernelTick.Store(int64(t))
	return t
}

// deriveHZ is the HZ that relates jiffies to the monotonic clock, 0 when
// none or several do.
func deriveHZ(jiffies, monoNs uint64) uint64 {
	if jiffies == 0 {
		return 0
	}
	found := uint64(0)
	for _, hz := range hzCandidates {
		if predicts(hz, jiffies, monoNs) {
			if found != 0 {
				return 0
			}
			found = hz
		}
	}
	return found
}

// hzOf is deriveHZ's answer, or, in the first minutes after boot when
// several candidates fit, the kernel's HZ from its config (or measured) if
// it predicts the jiffies too (a node agent starts with its node: without it the tick stayed
// unknown for its first ~8 minutes).
func hzOf(jiffies, monoNs uint64) uint64 {
	if hz := deriveHZ(jiffies, monoNs); hz != 0 {
		return hz
	}
	if hz := kernelHZ(); hz != 0 && jiffies != 0 && predicts(hz, jiffies, monoNs) {
		return hz
	}
	return 0
}

// predicts: hz relates jiffies to the monotonic clock. jiffies = 2^32 -
// 300*HZ + HZ*mono (mono in seconds), within two seconds' worth of ticks
// (the clocks start a moment apart at boot).
func predicts(hz, jiffies, monoNs uint64) bool {
	pred := float64(1<<32) - 300*float64(hz) + float64(hz)*float64(monoNs)/1e9
	d := float64(jiffies) - pred
	return d < 2*float64(hz) && d > -2*float64(hz)
}

// kernelHZ is the kernel's HZ as collector.KernelHZ gives it (the config,
// else jiffies measured against the clock over 200 ms), 0 when neither
// works. Read once.
var kernelHZ = sync.OnceValue(func() uint64 {
	hz, err := collector.KernelHZ()
	if err != nil {
		return 0
	}
	return uint64(hz)
})
