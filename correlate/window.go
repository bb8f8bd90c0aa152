package correlate

import (
	"fmt"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// span is what counts for one deadline, in CLOCK_MONOTONIC ns.
//
// A connection is a candidate when it was in use in [lo, expiry]: a socket
// whose first sign of life comes after the expiry (the application's
// retry, say) cannot have been what the request waited on. Evidence of
// trouble on a candidate counts in [lo, hi], hi = expiry + grace: an RTO
// that fires just after the deadline's timer says the data was already
// unacknowledged before it.
type span struct {
	lo, expiry, hi uint64
	created        uint64 // the context's creation, when seen (lo is Slack before it); else 0
	// send: the send side of the connection examined, read at the expiry
	// (a waiter's, event.Waiter.ConnSend); nil when not read. Settled,
	// its retransmits after the expiry repeat what was written after it:
	// listed (after_expiry), not counted. Recovering, its earlier
	// retransmits had not repaired it.
	send *event.SendState
	// rcvAgo: how long at least before the expiry that connection's last
	// data segment arrived (event.Waiter.ConnRcvAgo), for a connection
	// that carries one request at a time; 0: not known, or multiplexed.
	rcvAgo time.Duration
}

// window returns the searched window for d, the span of event times that
// count, and a note when the window is approximate.
func (c *Correlator) window(d *event.Deadline) (Window, span, string) {
	grace := uint64(c.cfg.Grace)
	sp := span{expiry: d.Mono, hi: d.Mono + grace}
	if d.Detail && d.CreatedMono != 0 && d.CreatedMono <= d.Mono {
		sp.lo, sp.created = subSat(d.CreatedMono, uint64(c.cfg.Slack)), d.CreatedMono
		return Window{Start: d.CreatedMono, End: d.Mono}, sp, ""
	}
	sp.lo = subSat(d.Mono, uint64(c.cfg.Lookback))
	note := fmt.Sprintf("window approximate: the deadline's creation was not seen (detail probes off), so the %v before the expiry were searched", c.cfg.Lookback)
	if d.Detail {
		note = fmt.Sprintf("window approximate: the recorded creation time is after the expiry, so the %v before the expiry were searched", c.cfg.Lookback)
	}
	return Window{Start: sp.lo, End: d.Mono, Approximate: true}, sp, note
}

func subSat(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// activeIn reports whether the socket was in use in [lo, hi]: a TCP event
// then, or activity that may have been (a sample vouches for up to one
// resolution after it, since the producer emits at most one per
// resolution).
func (c *Correlator) activeIn(s *socket, lo, hi uint64) (tcp, activity bool) {
	res := uint64(c.cfg.ActivityResolution)
	if s.lastSeen+res < lo {
		return false, false // nothing since before the window: the common case for idle sockets
	}
	for i, from := s.act.len()-1, s.actFrom(lo, res); i >= from; i-- {
		if iv := s.act.at(i); iv.start <= hi && iv.end+res >= lo {
			activity = true
			break
		}
	}
	for i := s.hist.len() - 1; i >= 0; i-- {
		if m := s.hist.at(i).mono; m >= lo && m <= hi {
			tcp = true
			break
		}
	}
	return tcp, activity
}

// bound is a socket a goroutine was bound to in a window.
type bound struct {
	cookie uint64
	srcs   uint8 // bit per source
}

// gor is goroutine k's slot, or nil.
func (c *Correlator) gor(k gkey) *goroutine {
	p := c.procs[k.pid]
	if p == nil {
		return nil
	}
	i, ok := p.gors[k.goid]
	if !ok {
		return nil
	}
	return &c.gors[i]
}

// bindingsEvictedSince reports whether goroutine k lost a binding that
// ended at or after lo.
func (c *Correlator) bindingsEvictedSince(k gkey, lo uint64) bool {
	g := c.gor(k)
	return g != nil && g.evictedLast >= lo
}

// boundIn returns the sockets goroutine k was bound to in [lo, hi], in the
// order of their first binding there.
func (c *Correlator) boundIn(k gkey, lo, hi uint64) []bound {
	g := c.gor(k)
	if g == nil {
		return nil
	}
	var out []bound
	add := func(b *bindIv) {
		if b.first > hi || b.last < lo {
			return
		}
		for o := range out {
			if out[o].cookie == b.cookie {
				out[o].srcs |= b.srcs
				return
			}
		}
		out = append(out, bound{cookie: b.cookie, srcs: b.srcs})
	}
	for j := 0; j < g.binds.len(); j++ {
		add(g.binds.at(j))
	}
	if g.hasRun {
		add(&g.run)
	}
	return out
}

// actFrom is the index of the oldest activity item of s that may reach
// into a window starting at lo: the newest alone when every older one
// ended more than res before lo (see socket.actOldEnd).
func (s *socket) actFrom(lo, res uint64) int {
	if s.actOldEnd+res < lo {
		return max(s.act.len()-1, 0)
	}
	return 0
}
