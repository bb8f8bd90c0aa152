package goprobe

import (
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// expirySeen remembers the expiries delivered in the last seconds. The
// cold probes are shared per executable file as the node agent sees it
// (device, inode); two containers of one image see the same file through
// two overlayfs mounts (two devices), but the kernel puts uprobes on the
// file underneath, so both attachments fire for a process of either: the
// same expiry arrives twice. A context expires once (its own timer, or at
// creation): (pid, context, deadline, kind) names one expiry.
type expirySeen struct {
	m    map[expiryKey]uint64 // -> monotonic time delivered
	last uint64               // when old entries were last pruned
}

type expiryKey struct {
	pid      uint32
	ctx      uint64
	deadline int64
	kind     event.ExpiryKind
}

// maxExpirySeen bounds the expiries remembered.
const maxExpirySeen = 1 << 16

// expiryMemory is how long a delivered expiry is remembered.
const expiryMemory = uint64(2 * time.Second)

func (e *expirySeen) seen(ev *event.Deadline) bool {
	if e.m == nil {
		e.m = make(map[expiryKey]uint64)
	}
	k := expiryKey{ev.PID, ev.Ctx, ev.Deadline.UnixNano(), ev.Kind}
	if t, ok := e.m[k]; ok && ev.Mono-t < expiryMemory {
		return true
	}
	// Bounded, at O(1) per expiry: old entries go once per expiryMemory,
	// and a table that fills anyway (a storm) is emptied at once (a
	// duplicate may then pass once: reported twice, never lost).
	switch {
	case len(e.m) >= maxExpirySeen:
		clear(e.m)
		e.last = ev.Mono
	case ev.Mono-e.last > expiryMemory:
		for k, t := range e.m {
			if ev.Mono-t >= expiryMemory {
				delete(e.m, k)
			}
		}
		e.last = ev.Mono
	}
	e.m[k] = ev.Mono
	return false
}
