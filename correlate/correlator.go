package correlate

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// Correlator turns the event stream into reports. It is not safe for
// concurrent use: one goroutine feeds it, in stream order.
type Correlator struct {
	cfg Config

	now       uint64 // the stream's time: the largest Mono seen
	started   bool
	lastSweep uint64

	// Kernel coverage: the first TCP or activity event. Before it, a
	// connection without trouble events may just be one nobody watched.
	kernelSeen  bool
	kernelFirst uint64

	socks        []socket
	addrs        []sockAddrs // by socket slot
	sockFree     []int32
	sockByCookie cookieIndex
	liveSocks    int

	gors     []goroutine
	gorFree  []int32
	liveGors int
	// When goroutines last lost their bindings to a cap: a deadline whose
	// window reaches back there cannot trust the absence of a binding.
	gorEvicted      bool
	lastGorEviction uint64

	procs map[uint32]*proc
	// peerRTT is the latest smoothed RTT (µs) any connection to a peer
	// host reported: what an unanswered connect to it is measured against.
	peerRTT map[netip.Addr]uint32

	pending []pendingDeadline // pending[head:] waits, sorted by (expiry, seq)
	head    int
	seq     uint64

	out      []Report // returned by Push/Advance/Flush, reused
	scratch  []int32
	evPool   []*evidence // see newEvidence
	evUsed   int
	cands    []*evidence
	sortKeys []evKey // see sortEvidence
	stats    Stats
}

type pendingDeadline struct {
	d   event.Deadline
	seq uint64
}

// New returns a Correlator; zero fields of cfg take their defaults.
// maxPeerRTT bounds Correlator.peerRTT: past it, it starts afresh.
const maxPeerRTT = 4096

func New(cfg Config) (*Correlator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Correlator{
		cfg:   cfg,
		procs: make(map[uint32]*proc),
	}, nil
}

// Config returns the configuration in effect, defaults filled in.
func (c *Correlator) Config() Config { return c.cfg }

// Push applies one event and returns the reports that became ready: those
// whose expiry plus grace the stream has now passed. Push does not keep ev.
// The returned slice is reused by the next call; the Reports in it may be
// kept.
func (c *Correlator) Push(ev event.Any) []Report {
	c.out = c.out[:0]
	c.stats.Events++
	t := ev.MonoTime()
	c.advance(t)
	switch e := ev.(type) {
	case *event.TCP:
		if a, ok := e.Activity(); ok {
			c.stats.Activity++
			c.onActivity(&a)
		} else if e.AtAttach {
			c.StateAtAttach(e) // replayed from a recording
		} else {
			c.stats.TCP++
			c.onTCP(e)
		}
	case *event.SockActivity:
		c.stats.Activity++
		c.onActivity(e)
	case *event.Binding:
		c.stats.Bindings++
		c.onBinding(e)
	case *event.Deadline:
		c.stats.Deadlines++
		c.onDeadline(e)
	case *event.Local:
		c.stats.Local++
		c.onLocal(e)
	}
	return c.out
}

// Advance tells the correlator that the stream has no events before mono
// (time passes while nothing happens) and returns the reports that became
// ready. The returned slice is reused by the next call.
func (c *Correlator) Advance(mono uint64) []Report {
	c.out = c.out[:0]
	c.advance(mono)
	return c.out
}

// Flush reports every pending deadline, at the end of the stream, as if its
// grace window had passed. The returned slice is reused by the next call.
func (c *Correlator) Flush() []Report {
	c.out = c.out[:0]
	for c.waiting() > 0 {
		c.emitFirst()
	}
	return c.out
}

// Stats returns the counters and current table sizes.
func (c *Correlator) Stats() Stats {
	s := c.stats
	s.LiveSockets, s.LiveGoroutines, s.LiveProcesses, s.Pending = c.liveSocks, c.liveGors, len(c.procs), c.waiting()
	return s
}

// advance moves the stream's time to t (never back), emits what is ready
// and sweeps once per second of stream time. Reports are emitted before
// the event at t is applied: an event past a deadline's grace window must
// not change its report, so that a report does not depend on how the
// stream was cut into calls.
func (c *Correlator) advance(t uint64) {
	if !c.started {
		c.started, c.now, c.lastSweep = true, t, t
	}
	if t < c.now {
		c.stats.OutOfOrder++
		return
	}
	c.now = t
	c.emitReady(t)
	if t-c.lastSweep >= uint64(time.Second) {
		c.sweep(t)
		c.lastSweep = t
	}
}

func (c *Correlator) waiting() int { return len(c.pending) - c.head }

// Waiting is the number of expired deadlines waiting for their grace
// window to end: Advance has work to do only while it is not 0.
func (c *Correlator) Waiting() int { return c.waiting() }

// NextDue is the stream time past which Advance makes the next report (the
// first waiting deadline's expiry plus the grace window); false when none
// waits.
func (c *Correlator) NextDue() (uint64, bool) {
	if c.waiting() == 0 {
		return 0, false
	}
	return c.pending[c.head].d.Mono + uint64(c.cfg.Grace) + 1, true
}

// emitReady reports the deadlines whose grace window ended before t.
func (c *Correlator) emitReady(t uint64) {
	grace := uint64(c.cfg.Grace)
	for c.waiting() > 0 && c.pending[c.head].d.Mono+grace < t {
		c.emitFirst()
	}
}

func (c *Correlator) emitFirst() {
	p := &c.pending[c.head]
	c.out = append(c.out, c.evaluate(&p.d))
	c.stats.Reports++
	*p = pendingDeadline{} // drop references to the deadline's strings
	c.head++
	switch {
	case c.head == len(c.pending):
		c.pending, c.head = c.pending[:0], 0
	case c.head >= 64 && c.head*2 >= len(c.pending):
		// A queue that never drains must not grow: move the waiting ones down.
		n := copy(c.pending, c.pending[c.head:])
		clear(c.pending[n:])
		c.pending, c.head = c.pending[:n], 0
	}
}

func (c *Correlator) onDeadline(d *event.Deadline) {
	if c.waiting() >= c.cfg.MaxPending {
		c.emitFirst()
		c.stats.ReportsEarly++
	}
	c.seq++
	p := pendingDeadline{d: *d, seq: c.seq}
	// Deadlines arrive in expiry order; one out of order goes in its place.
	i, _ := slices.BinarySearchFunc(c.pending[c.head:], p, func(a, b pendingDeadline) int {
		return cmp.Or(cmp.Compare(a.d.Mono, b.d.Mono), cmp.Compare(a.seq, b.seq))
	})
	c.pending = slices.Insert(c.pending, c.head+i, p)
	// A deadline that arrives after its own grace window is ready at once.
	c.emitReady(c.now)
}

func (c *Correlator) sawKernel(t uint64) {
	if !c.kernelSeen || t < c.kernelFirst {
		c.kernelSeen, c.kernelFirst = true, t
	}
}

func (c *Correlator) onTCP(e *event.TCP) {
	if e.Cookie == 0 {
		c.stats.Unjoinable++
		return
	}
	c.sawKernel(e.Mono)
	i := c.socketIndex(e.Cookie, e.Mono)
	c.touchSocket(i, e.PID, e.Local, e.Peer, e.Mono)
	s := &c.socks[i]
	rec := tcpRec{
		mono: e.Mono, srttUs: clampU32(e.SRTT.Microseconds()), rtoUs: clampU32(e.RTO.Microseconds()),
		suppressed: e.Suppressed, errno: uint16(min(uint64(e.Errno), 0xffff)), kind: e.Kind, state: e.State,
		backoff: e.Backoff, retransmits: e.Retransmits, atAttach: e.AtAttach,
	}
	if rec.srttUs != 0 && e.Peer.IsValid() {
		if c.peerRTT == nil || len(c.peerRTT) >= maxPeerRTT {
			c.peerRTT = make(map[netip.Addr]uint32)
		}
		c.peerRTT[e.Peer.Addr()] = rec.srttUs
	}
	if s.hist.push(rec, c.cfg.MaxEventsPerSocket) {
		c.stats.EventsEvicted++
	}
	switch {
	case e.Kind == event.TCPEstablished && e.OldState == stateSynRecv:
		s.inbound = true
		if s.proc != nil {
			s.proc.accepted = true
		}
	case e.Kind == event.TCPConnect:
		s.outbound = true
	}
	switch e.Kind {
	case event.TCPClose, event.TCPClosing, event.TCPConnectFailed, event.TCPConnectAborted:
		if !s.closed || e.Mono < s.closedAt {
			s.closed, s.closedAt = true, e.Mono
		}
	}
}

func (c *Correlator) onActivity(a *event.SockActivity) {
	if a.Cookie == 0 {
		c.stats.Unjoinable++
		return
	}
	c.sawKernel(a.Mono)
	i := c.socketIndex(a.Cookie, a.Mono)
	c.touchSocket(i, a.PID, a.Local, a.Peer, a.Mono)
	s := &c.socks[i]
	gap := c.mergeGap()
	n := s.act.newest()
	if n != nil && a.Mono+gap >= n.start && a.Mono <= n.end+gap {
		n.start, n.end = min(n.start, a.Mono), max(n.end, a.Mono)
		n.sent = n.sent || a.Sent
		n.recv = n.recv || a.Received
		if a.Received {
			n.lastRecv = max(n.lastRecv, a.Mono)
		}
	} else {
		if n != nil {
			s.actOldEnd = max(s.actOldEnd, n.end)
		}
		iv := actIv{start: a.Mono, end: a.Mono, sent: a.Sent, recv: a.Received}
		if a.Received {
			iv.lastRecv = a.Mono
		}
		if s.act.push(iv, c.cfg.MaxActivityPerSocket) {
			c.stats.ActivityEvicted++
		}
	}
	p := s.proc
	if p == nil {
		return // owner unknown
	}
	if !p.hasActivity || a.Mono < p.firstActivity {
		p.hasActivity, p.firstActivity = true, a.Mono
	}
	if a.Goid == 0 {
		return
	}
	c.bindAt(c.socketGoroutine(i, p, a.Goid, a.Mono), a.Cookie, a.Mono, srcActivity)
}

func (c *Correlator) onBinding(b *event.Binding) {
	if b.Cookie == 0 {
		c.stats.Unjoinable++
		return
	}
	i := c.socketIndex(b.Cookie, b.Mono)
	c.touchSocket(i, b.PID, netip.AddrPort{}, netip.AddrPort{}, b.Mono)
	if b.PID == 0 || b.Goid == 0 {
		// Goroutine 0 is the runtime's g0: its I/O belongs to no request.
		return
	}
	p := c.socks[i].proc
	if p == nil || p.pid != b.PID {
		p = c.procFor(b.PID, b.Mono) // the socket is another process's: bind the goroutine all the same
	}
	c.bindAt(c.socketGoroutine(i, p, b.Goid, b.Mono), b.Cookie, b.Mono, sourceOf(b.Source))
	if b.RequestLevel() {
		if !p.hasReq {
			p.hasReq, p.reqFirst, p.reqLast = true, b.Mono, b.Mono
		}
		p.reqFirst, p.reqLast = min(p.reqFirst, b.Mono), max(p.reqLast, b.Mono)
		p.reqBindingCount++
	}
}

// HeldAtAttach declares that process pid held n TCP connections when it
// was attached at mono: connections older than the tracer, whose past it
// did not see. A window that began before mono cannot conclude "no TCP
// I/O" for it (a connect in SYN retries, data in RTO backoff since before
// the attach, may send nothing more), so such a timeout is unknown rather
// than local.
func (c *Correlator) HeldAtAttach(pid uint32, n int, mono uint64) {
	p := c.procFor(pid, mono)
	if p == nil || n <= 0 {
		return
	}
	p.oldConns, p.oldAt = uint32(min(n, 1<<31)), mono
}

// StateAtAttach records what the kernel said of a connection older than
// the tracer when its process was attached (event.TCP with AtAttach: in
// RTO backoff, in SYN retries, or probing a closed window): such a
// connection may send nothing more that a hook sees before the request
// waiting on it expires (the next RTO of a backoff can be seconds away),
// and without it that timeout read "no TCP I/O" or unknown. The record is
// evidence in the windows that contain the attach, as a kernel event of
// its kind would be; reports mark it (at_attach).
func (c *Correlator) StateAtAttach(e *event.TCP) {
	if !e.AtAttach {
		return
	}
	c.stats.StateAtAttach++
	c.onTCP(e)
}

// InboundAtAttach says that the connections with these cookies, older than
// the collector, were accepted by their process (their local port is one
// of its listening ports): no handshake will say so.
func (c *Correlator) InboundAtAttach(cookies []uint64, mono uint64) {
	for _, k := range cookies {
		i := c.socketIndex(k, mono)
		if s := &c.socks[i]; !s.outbound {
			s.inbound = true
			if s.proc != nil {
				s.proc.accepted = true
			}
		}
	}
}

func clampU32(v int64) uint32 {
	return uint32(min(max(v, 0), 1<<32-1))
}

// WatchActivity declares that the socket activity of pid is sampled from
// mono on (the kernel collector's activity events are on for it). The
// absence of activity in a deadline's window then means the process did no
// network I/O, even if it never had any: class local rather than unknown.
func (c *Correlator) WatchActivity(pid uint32, mono uint64) {
	p := c.procFor(pid, mono)
	if p == nil {
		return
	}
	if !p.hasActivity || mono < p.firstActivity {
		p.hasActivity, p.firstActivity = true, mono
	}
}
