package goprobe

import (
	"time"
	"unsafe"

	"github.com/timeout-tracer/tracer/event"
)

// lookup finds the process an event belongs to, traced or recently gone.
func (n *Node) lookup(pid uint32) *Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p, ok := n.procs[pid]; ok {
		return p
	}
	if g, ok := n.gone[pid]; ok {
		return g.p
	}
	n.unknownPID++
	return nil
}

func (n *Node) read(poll time.Duration) {
	defer n.wg.Done()
	defer close(n.events)
	n.reader.Consume(poll, n.log, func(raw []byte) bool {
		if n.tap != nil {
			n.tap("go_events", raw)
		}
		if len(raw) < goEventSize {
			n.countDecodeError()
			return true
		}
		pid := (*godeadlineTtGoEvent)(unsafe.Pointer(&raw[0])).Pid
		p := n.lookup(pid)
		if p == nil {
			return true
		}
		var ev event.Deadline
		if err := p.decode(raw, &ev); err != nil {
			n.countDecodeError()
			n.log.Warn("drop undecodable deadline event", "err", err)
			return true
		}
		if (ev.ClientTimer || ev.DialTimer) && ev.Deadline.After(ev.Time.Add(notExpiredSlack)) {
			n.mu.Lock()
			n.notExpired++
			n.mu.Unlock()
			return true
		}
		if n.shared.Load() && n.dup.seen(&ev) { // only shared probes deliver twice
			n.mu.Lock()
			n.duplicates++
			n.mu.Unlock()
			return true
		}
		select {
		case n.events <- ev:
			return true
		case <-n.done:
			return false
		}
	})
}

// notExpiredSlack: a context reported by net/http's doCancel whose
// deadline is further than this past the probe's clock was not expiring:
// the program closed its request's Cancel channel itself. Likewise a
// dial's context found when a socket write deadline fired whose own
// deadline is not yet due (not the one the socket's was set from). The timer that
// calls doCancel fires at the deadline or after; the slack covers the
// mapping of the monotonic clock to the wall clock.
const notExpiredSlack = 20 * time.Millisecond

func (n *Node) countDecodeError() {
	n.mu.Lock()
	n.decodeErrors++
	n.mu.Unlock()
}

func (n *Node) readBindings(poll time.Duration) {
	defer n.wg.Done()
	defer close(n.bindings)
	dropCall := func() {
		n.mu.Lock()
		n.callsDropped++ // nobody reads calls (no audit): counted, not blocking
		n.mu.Unlock()
	}
	n.bindRd.Consume(poll, n.log, func(raw []byte) bool {
		if n.tap != nil {
			n.tap("go_bindings", raw)
		}
		if len(raw) < bindingSize {
			n.countDecodeError()
			return true
		}
		var r gocallsTtGoBinding
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&r)), bindingSize), raw)
		p := n.lookup(r.Pid)
		if p == nil {
			return true
		}
		p.lateCookie(&r)
		if handled, cont := p.deliverExt(&r); handled {
			return cont
		}
		if r.Kind == uint8(gocallsTtGoBindingKindTT_BIND_HTTP_END) {
			c := event.Call{Mono: r.TsNs, Time: n.clk.Wall(r.TsNs), PID: r.Pid, Comm: p.comm, Goid: r.Goid, Kind: "http", End: true}
			select {
			case n.calls <- c:
			default:
				dropCall()
			}
			return true
		}
		if r.Cookie != 0 {
			b := event.Binding{Mono: r.TsNs, PID: r.Pid, Goid: r.Goid, Cookie: r.Cookie, Source: event.BindHTTPRoundTrip}
			select {
			case n.bindings <- b:
			case <-n.done:
				return false
			}
		}
		select {
		case n.calls <- p.call(&r):
		default:
			dropCall()
		}
		return true
	})
}
