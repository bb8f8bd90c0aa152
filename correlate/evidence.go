package correlate

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// evidence is what one socket showed in a window.
type evidence struct {
	s      *socket
	cookie uint64
	addrs  *sockAddrs // in Correlator.addrs, read only when needed (see addr); nil: unknown
	via    string
	n      [32]int // TCP events by kind in [lo, hi]
	supp   int
	first  uint64
	last   uint64
	seen   bool
	rtos   []rtoAt   // the RTO events, in time order, for the summary
	evs    []*tcpRec // the TCP events in [lo, hi], for the report's timeline
	sent   bool
	recv   bool
	// Causal trouble: errors and resets count only up to the expiry. One
	// that comes after it did not make the request time out (it would
	// have failed it instead), and the application's own reaction to its
	// timeout (closing with unread data: a reset sent) is no cause.
	resetEst, resetSyn        bool
	errTimedOut, errSynTimed  bool
	errReset, errRefused      bool
	errOther                  syscall.Errno
	connTimedOut              bool
	connRejected              syscall.Errno
	abortedRetry, abortedBare bool
	established               bool
	// closedAfter: the process closed the socket (or gave up its connect)
	// within CloseWindow of the expiry: the expiring call's, likely.
	closedAfter bool
	// closedBefore: the process closed it (or gave up its connect) longer
	// than that before the expiry. A call whose connection is closed ends
	// with an error then, not at its deadline: not the expiring call's.
	closedBefore bool
	// youngSyn: a connect still in its handshake at the expiry, not
	// retried yet (class unknown).
	youngSyn  bool
	connectAt uint64  // its connect in the window (0: not seen)
	snap      *tcpRec // last record at or before hi with an RTT snapshot
	state     *tcpRec // last record at or before hi
	before    *tcpRec // last record before the window
	// attach: the latest record of the socket's state read at attach in
	// the window (StateAtAttach), nil when none.
	attach *tcpRec
	// afterSettled: retransmits after the expiry of a connection settled
	// at it (span.send), listed and not counted.
	afterSettled int
	// send: the connection's send side read at the expiry (span.send),
	// nil when not read.
	send *event.SendState

	class Class
	why   string // for ClassUnknown
}

type rtoAt struct {
	mono  uint64
	rtoMs int64
}

// examine collects the evidence of the socket in slot i for sp.
func (c *Correlator) examine(i int32, sp span, via string) *evidence {
	s := &c.socks[i]
	e := c.newEvidence()
	e.s, e.cookie, e.addrs, e.via, e.send = s, s.cookie, &c.addrs[i], via, sp.send
	// Newest first, stopping once past the window with the snapshots
	// and the last record before the window found: the history is in arrival order, which is time order up to
	// late events, and those are at most about a grace window late.
	late := uint64(c.cfg.Grace)
	var localClose, end uint64 // first close by this side, first end, in the window
	var resetAt uint64         // first causal reset of an established connection
	for i := s.hist.len() - 1; i >= 0; i-- {
		r := s.hist.at(i)
		if r.mono > sp.hi {
			continue
		}
		if r.mono+late < sp.lo && e.snap != nil && e.state != nil && e.before != nil {
			break
		}
		// The latest record, the later arrival on a tie.
		if r.srttUs != 0 || r.rtoUs != 0 {
			if e.snap == nil || r.mono > e.snap.mono {
				e.snap = r
			}
		}
		if e.state == nil || r.mono > e.state.mono {
			e.state = r
		}
		if r.mono < sp.lo {
			if e.before == nil || r.mono > e.before.mono {
				e.before = r
			}
			continue
		}
		e.note(r.mono)
		e.evs = append(e.evs, r)
		if r.atAttach && (e.attach == nil || r.mono > e.attach.mono) {
			e.attach = r
		}
		if r.kind == event.TCPConnect && (e.connectAt == 0 || r.mono < e.connectAt) {
			e.connectAt = r.mono
		}
		causal := r.mono <= sp.expiry
		if !causal && sp.send.Settled() && r.kind.Retransmit() {
			// Nothing was unacknowledged at the expiry: this repeats
			// what the cancellation sent after it (hey over TLS to a slow
			// server: a tail loss probe of its close_notify and FIN, 4 ms
			// after the expiry, the server delaying its ACK). Listed, not
			// counted.
			e.afterSettled++
			continue
		}
		if int(r.kind) < len(e.n) {
			e.n[r.kind]++
		}
		e.supp += int(r.suppressed)
		errno := syscall.Errno(r.errno)
		switch r.kind {
		case event.TCPClosing, event.TCPResetSent, event.TCPConnectAborted:
			// This side's close (TCPClose is any end, a peer's reset
			// included).
			if localClose == 0 || r.mono < localClose {
				localClose = r.mono
			}
		case event.TCPClose:
			if end == 0 || r.mono < end {
				end = r.mono
			}
		}
		switch r.kind {
		case event.TCPRTO:
			e.rtos = append(e.rtos, rtoAt{r.mono, int64(r.rtoUs+500) / 1000})
		case event.TCPEstablished:
			e.established = true
		case event.TCPResetReceived:
			if causal {
				if r.state == stateSynSent {
					e.resetSyn = true
				} else {
					e.resetEst = true
					if resetAt == 0 || r.mono < resetAt {
						resetAt = r.mono
					}
				}
			}
		case event.TCPConnectFailed:
			if errno == syscall.ETIMEDOUT {
				e.connTimedOut = true
			} else if causal {
				e.connRejected = errno
			}
		case event.TCPConnectAborted:
			if r.retransmits > 0 {
				e.abortedRetry = true
			} else {
				e.abortedBare = true
			}
		case event.TCPSocketError:
			if !causal {
				break
			}
			switch errno {
			case syscall.ETIMEDOUT:
				if r.state == stateSynSent {
					e.errSynTimed = true
				} else {
					e.errTimedOut = true
				}
			case syscall.ECONNRESET, syscall.EPIPE:
				e.errReset = true
			case syscall.ECONNREFUSED:
				e.errRefused = true
			default:
				e.errOther = errno
			}
		}
	}
	// A reset that came after this side's close answers it (the peer
	// finding data or a FIN on a connection it had dropped): the process
	// had given the connection up already, so no call on it was stopped
	// by the reset. TestLocalGCPause, 800 requests cancelled after 3 ms:
	// the transport closes each cancelled request's connection and the
	// server resets a few within 30 µs; the next request's window read
	// "reset by the peer" on a healthy network (4 of 269 in CI).
	if e.resetEst && localClose != 0 && resetAt >= localClose {
		e.resetEst = false
	}
	// Closed with the call: this side's close, or else the end, within
	// CloseWindow of the expiry (either side: a call ended by a socket
	// deadline set from the context closes its connection a moment before
	// the context's timer fires). Closed before: this side's close longer
	// before it.
	win := uint64(c.cfg.CloseWindow)
	switch {
	case localClose != 0 && localClose+win < sp.expiry:
		e.closedBefore = true
	case localClose != 0:
		e.closedAfter = localClose <= sp.expiry+win
	case end != 0:
		e.closedAfter = end+win >= sp.expiry && end <= sp.expiry+win
	}
	res := uint64(c.cfg.ActivityResolution)
	for i, n := s.actFrom(sp.lo, res), s.act.len(); i < n; i++ {
		iv := s.act.at(i)
		if iv.start <= sp.hi && iv.end+res >= sp.lo {
			e.sent = e.sent || iv.sent
			e.recv = e.recv || iv.recv && iv.lastRecv+res >= sp.lo
			for _, t := range [2]uint64{iv.start, iv.end} {
				if t >= sp.lo && t <= sp.hi {
					e.note(t)
				}
			}
		}
	}
	slices.SortStableFunc(e.rtos, func(a, b rtoAt) int { return cmp.Compare(a.mono, b.mono) })
	if e.before != nil && e.before.kind == event.TCPRTO && e.n[event.TCPRTO] == 0 && inBackoff(s, e.before, sp, res) {
		// In RTO backoff when the window began, its timer still pending:
		// the connection was dead for the whole life, though its next
		// retransmit came after it (vegeta over HTTP/2, every request on
		// one connection to a blackholed server: the last requests' windows
		// fell between the 1.6 s and 3.2 s backoffs and read slow_peer, "no
		// retransmits"). That RTO is the evidence, listed and counted. The
		// window's own events (the cancellation's close at its end) do not
		// hide it: the last record before the window is the RTO.
		r := e.before
		e.evs = append(e.evs, r)
		e.n[r.kind]++
		e.rtos = append(e.rtos, rtoAt{mono: r.mono, rtoMs: int64(r.rtoUs+500) / 1000})
		e.note(r.mono)
	}
	e.class, e.why = c.verdict(e, sp)
	return e
}

const (
	stateSynSent = event.TCPSynSent
	stateSynRecv = event.TCPSynRecv
)

func (e *evidence) note(t uint64) {
	if !e.seen || t < e.first {
		e.first = t
	}
	if !e.seen || t > e.last {
		e.last = t
	}
	e.seen = true
}

// verdict names what the connection shows, most specific first.
func (c *Correlator) verdict(e *evidence, sp span) (Class, string) {
	n := &e.n
	switch {
	case n[event.TCPRTO] > 0 || e.errTimedOut:
		return ClassRTO, ""
	case n[event.TCPSynRetransmit] > 0 || n[event.TCPSynAckRetransmit] > 0 || e.connTimedOut || e.errSynTimed || e.abortedRetry:
		return ClassSynTimeout, ""
	case sp.send.SynRetried():
		// Read at the expiry: still sending its SYN, and the SYN's
		// retransmission timer had fired (its retransmit before the
		// window, or not seen).
		return ClassSynTimeout, ""
	case e.resetEst || e.errReset:
		return ClassReset, ""
	case e.resetSyn || e.connRejected != 0 || e.errRefused:
		return ClassRefused, ""
	case n[event.TCPZeroWindow] > 0:
		return ClassZeroWindow, ""
	case (n[event.TCPFastRetransmit] > 0 || n[event.TCPRetransmit] > 0) && !e.repairedBefore(sp):
		return ClassFastRetransmit, ""
	case sp.send.Recovering() && sp.send.CAState == event.CALoss:
		// Read at the expiry: unacknowledged data in loss after an RTO,
		// the RTO itself outside the window or not seen.
		return ClassRTO, ""
	case sp.send.Recovering():
		// Read at the expiry: still in fast recovery, its retransmits
		// not seen in the window (or acknowledged, the recovery not over).
		return ClassFastRetransmit, ""
	case n[event.TCPTLP] > 0 && e.probedBefore(sp) && !e.repairedBefore(sp) && !e.probedOlder(sp):
		return ClassTLP, ""
	case (e.abortedBare || (e.state != nil && e.state.state == stateSynSent && !e.established)) && c.synUnanswered(e, sp):
		return ClassSynTimeout, ""
	case e.abortedBare || (e.state != nil && e.state.state == stateSynSent && !e.established) || sp.send.Connecting():
		// A SYN unanswered for less than the first SYN retry (1 s) is no
		// proof of loss: the handshake was still in progress.
		e.youngSyn = true
		return ClassUnknown, fmt.Sprintf("the connect to %s was still in its handshake when the deadline expired (no SYN retry yet)", e.peerName())
	case e.errOther != 0:
		return ClassUnknown, fmt.Sprintf("the connection to %s failed with %s", e.peerName(), errnoName(e.errOther))
	case !c.kernelSeen || c.kernelFirst > sp.hi:
		return ClassUnknown, "no kernel TCP events were recorded, so the connection's health is unknown"
	case e.state == nil && !e.sent && !e.recv:
		// Known from a binding alone: not one kernel event (no state
		// change, no send or receive, no retransmit) of the socket was
		// recorded up to the expiry. That is no proof of health: in a
		// cluster such a socket was a connect in SYN retries whose events
		// had gone under another socket's entry.
		return ClassUnknown, "no kernel event of this socket was recorded, so its health is unknown"
	}
	return ClassSlowPeer, ""
}

// addr returns the socket's addresses. Evidence points into the table
// rather than copying them: most candidates of an ambiguous report are
// never listed, and reading their addresses would be a cache miss each.
// The table does not move during evaluate (no socket is created there).
func (e *evidence) addr() sockAddrs {
	if e.addrs == nil {
		return sockAddrs{}
	}
	return *e.addrs
}

func (e *evidence) peerName() string { return peerName(e.addr().peer, e.cookie) }

func peerName(peer netip.AddrPort, cookie uint64) string {
	if peer.IsValid() {
		return peer.String()
	}
	return fmt.Sprintf("socket %#x", cookie)
}

func errnoName(e syscall.Errno) string {
	n := (&event.TCP{Errno: e}).ErrnoName()
	if n == "" {
		return "no error"
	}
	return n
}

// newEvidence hands out a zeroed evidence from a pool that lives as long
// as the correlator: a report over a hundred candidate sockets must not
// cost a hundred allocations. Valid until the next evaluate.
func (c *Correlator) newEvidence() *evidence {
	if c.evUsed == len(c.evPool) {
		c.evPool = append(c.evPool, new(evidence))
	}
	e := c.evPool[c.evUsed]
	c.evUsed++
	*e = evidence{rtos: e.rtos[:0], evs: e.evs[:0]}
	return e
}

// troubleStart is the time of the socket's first sign of network trouble
// in the window (a retransmit of any kind, a reset, a failed connect, a
// closed window), or its first event when it shows none.
func (e *evidence) troubleStart() uint64 {
	t, found := e.first, false
	for _, r := range e.evs { // newest first
		switch r.kind {
		case event.TCPRTO, event.TCPFastRetransmit, event.TCPTLP, event.TCPSynRetransmit, event.TCPRetransmit,
			event.TCPResetReceived, event.TCPConnectFailed, event.TCPZeroWindow, event.TCPSynAckRetransmit:
			if !found || r.mono < t {
				t, found = r.mono, true
			}
		}
	}
	return t
}

// Before its first SYN retry (1 s after the connect), a connect is
// unanswered when it waited far longer than the peer answers: at least
// synUnansweredRTTs round trips of the latest RTT any connection to the
// peer host measured, and synUnansweredMin; with no RTT known, at least
// synUnansweredBare (90 % of the first retry's wait). A 1 s connect
// timeout on a blackholed server (grpc_health_probe's default) expired
// just before the retry and read unknown, "still in its handshake".
const (
	synUnansweredRTTs = 20
	synUnansweredMin  = 100 * time.Millisecond
	synUnansweredBare = 900 * time.Millisecond
)

// synUnanswered: the connect of e waited, up to the expiry, long enough to
// call it unanswered (see synUnansweredRTTs).
func (c *Correlator) synUnanswered(e *evidence, sp span) bool {
	if e.connectAt == 0 || e.connectAt > sp.expiry {
		return false
	}
	waited := time.Duration(sp.expiry - e.connectAt)
	if rtt, ok := c.peerRTT[e.addr().peer.Addr()]; ok && rtt != 0 {
		return waited >= max(synUnansweredMin, synUnansweredRTTs*time.Duration(rtt)*time.Microsecond)
	}
	return waited >= synUnansweredBare
}

// repairedBefore: the socket's mild trouble (tail loss probes, fast and
// other non-timer retransmits; no RTO, or the verdict would be rto) was
// over before the expiry. After such a retransmit the kernel arms the
// retransmission timer: had the retransmitted data gone unacknowledged,
// an RTO would have fired within the RTO armed at the event. None fired,
// so by then the loss was repaired, and a deadline that expired later
// waited on something else. vegeta over HTTP/2 to a slow server: one TLP
// on its one connection seconds before the expiries read tlp 33 times
// of 100 on a healthy network. Sooner than that, a retransmit_acked
// record says the same directly.
func (e *evidence) repairedBefore(sp span) bool {
	if e.n[event.TCPRTO] > 0 {
		return false
	}
	// Read at the expiry: the connection still had data unacknowledged
	// and was in loss recovery. Whatever retransmits were acknowledged
	// before, the losses were not repaired: a 16 MB upload under 8 %
	// loss, its last retransmit acknowledged 94 ms before its 100 ms
	// deadline, then waiting on its next lost segment, read slow_peer
	// ("repaired before the expiry"), 2 to 6 of ~75 uploads.
	if sp.send.Recovering() {
		return false
	}
	var last *tcpRec
	for _, r := range e.evs {
		switch r.kind {
		case event.TCPTLP, event.TCPFastRetransmit, event.TCPRetransmit:
			if r.mono <= sp.expiry && (last == nil || r.mono > last.mono) {
				last = r
			}
		}
	}
	if last == nil {
		return false // only after the expiry: they say nothing was repaired before it
	}
	// Read at the expiry: the connection was still delivering what the
	// process had written, and no data had come in since the last
	// retransmit (the answer to an earlier request would have). The
	// losses were in this request's own delivery, each recovery costing
	// it round trips and window, repaired or not: a 16 MB upload under 8 %
	// loss, fast retransmits acknowledged up to 7 ms before its 100 ms
	// deadline, read slow_peer ("repaired before the expiry").
	if sp.send != nil && sp.send.Unacked > 0 && sp.rcvAgo > 0 && last.mono+uint64(sp.rcvAgo) > sp.expiry {
		return false
	}
	// Acknowledged: the kernel's snd_una passed everything sent before
	// the retransmit, seen by the owner's next send or receive before the
	// expiry (the ACK came earlier still). A peer that delays its ACKs
	// past the probe timeout draws a tail loss probe that is answered at
	// once: vegeta over HTTP/2 to a server that answers after 4 s, its
	// probe acknowledged 42-44 ms after it, far sooner than its RTO.
	for _, r := range e.evs {
		if r.kind == event.TCPRetransmitAcked && r.mono >= last.mono && r.mono <= sp.expiry {
			return true
		}
	}
	return last.mono+last.rto() < sp.expiry
}

// rto is the retransmission timeout armed at r, in ns; with none recorded,
// the kernel's initial one.
func (r *tcpRec) rto() uint64 {
	if r.rtoUs == 0 {
		return uint64(time.Second)
	}
	return uint64(r.rtoUs) * 1000
}

// probedBefore: some tail loss probe in the window may repeat data sent
// before the expiry. The probe timer never outlasts the retransmission
// timer (tcp_schedule_loss_probe caps it at the RTO's remaining time), so
// what is unacknowledged when a probe fires was sent at most one RTO
// before it: a probe later than the expiry plus its RTO repeats only data
// sent after the expiry, the cancellation's own (vegeta over HTTP/2 to a
// server that answers after 4 s: the RST_STREAM frames of the expired
// streams drew a probe from the server's delayed ACKs, and the expiries
// before it read tlp, 6 of 100 in 2 runs of 4).
func (e *evidence) probedBefore(sp span) bool {
	for _, r := range e.evs {
		if r.kind != event.TCPTLP {
			continue
		}
		if r.mono <= sp.expiry+r.rto() {
			return true
		}
	}
	return false
}

// srtt is the socket's smoothed RTT in ns from its latest snapshot, 0 when
// none.
func (e *evidence) srtt() uint64 {
	if e.snap == nil {
		return 0
	}
	return uint64(e.snap.srttUs) * 1000
}

// probeUnanswered: read at the expiry, the connection a waiter of d was
// bound to still had data unacknowledged, its last transmission was its
// last tail loss probe (a retransmission is a transmission: nothing was
// sent after it), and that probe had fired long enough before the expiry
// to have been answered. A peer acknowledges a probe at once (a duplicate
// segment, or a second one in its delayed-ACK window), within a round
// trip; four smoothed RTTs, at least 10 ms, leave room for a host slow to
// process the ACK. A request sent after an older probe is no such proof:
// the peer may be delaying its ACK while it works.
func (e *evidence) probeUnanswered(d *event.Deadline) bool {
	if e.send == nil || e.send.Unacked == 0 {
		return false
	}
	var sentAgo time.Duration
	for _, w := range d.Waiters {
		if w.Conn == e.cookie && w.ConnSend != nil {
			sentAgo = w.ConnSentAgo
		}
	}
	if sentAgo == 0 {
		return false // not known
	}
	var last uint64
	for _, r := range e.evs {
		if r.kind == event.TCPTLP && r.mono <= d.Mono && r.mono > last {
			last = r.mono
		}
	}
	wait := max(4*e.srtt(), uint64(10*time.Millisecond))
	// sentAgo is at most how long since the last transmission: at least
	// the probe's age when the probe was the last.
	return last != 0 && last+wait <= d.Mono && uint64(sentAgo) >= d.Mono-last
}

// probedOlder: every tail loss probe in the window fired too soon after
// the context's creation to probe anything it sent. The probe timer is
// re-armed at each transmission and waits at least two smoothed RTTs plus
// two jiffies (tcp_schedule_loss_probe; 2 ms at HZ=1000), so a probe
// before the creation plus that repeats a segment sent before the request
// began: an
// earlier request's trouble, not this one's (800 requests of 3 ms each on a
// healthy network: a probe 1–3 ms into a life read tlp, in CI).
func (e *evidence) probedOlder(sp span) bool {
	srtt := e.srtt()
	if srtt == 0 || sp.created == 0 {
		return false // no RTT or no creation known: cannot tell
	}
	pto := 2*srtt + uint64(2*time.Millisecond)
	seen := false
	for _, r := range e.evs {
		if r.kind != event.TCPTLP {
			continue
		}
		if r.mono >= sp.created+pto {
			return false
		}
		seen = true
	}
	return seen
}

// inBackoff: the RTO r, the socket's last record before the window, had
// its next retransmission due only after the window's end (the timer
// armed at it, doubled by the backoff: had it come due inside the window,
// its RTO would be there, and its absence says the data was acknowledged),
// and nothing came back since: no receive in an activity sample after it.
func inBackoff(s *socket, r *tcpRec, sp span, res uint64) bool {
	next := uint64(r.rtoUs) * 1000 << 1 // the retransmission doubles it: the next one's wait
	if next == 0 || r.mono+next <= sp.hi {
		return false
	}
	for i := s.act.len() - 1; i >= 0; i-- {
		iv := s.act.at(i)
		if iv.end <= r.mono {
			break
		}
		// A receive sample hides the same goroutine's later receives
		// for up to one resolution (one per direction per epoch).
		if iv.recv && iv.lastRecv+res > r.mono {
			return false
		}
	}
	return true
}
