package correlate

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// The correlator's tables live in slabs (slices of structs indexed by
// int32, with free lists) rather than maps of pointers: a socket or
// goroutine that comes and goes reuses a slot and its ring buffers, so the
// hot path allocates nothing once the tables have grown.

// tcpRec is one TCP event as a socket's history keeps it: what the
// classification and the summary need, in 32 bytes.
type tcpRec struct {
	mono        uint64
	srttUs      uint32
	rtoUs       uint32
	suppressed  uint32
	errno       uint16
	kind        event.TCPKind
	state       event.TCPState
	backoff     uint8
	retransmits uint8
	// atAttach: the socket's state read at attach (event.TCP.AtAttach),
	// not an event at mono.
	atAttach bool
}

// actIv is a run of activity samples of one socket: I/O happened at start
// and end, and possibly at any time in between and up to one resolution
// after end (the producer emits at most one sample per resolution).
type actIv struct {
	start, end uint64
	// lastRecv is the latest receive sample's time (0: none): a run
	// merges sends and receives, and its end may be a send long after the
	// last receive (an HTTP/2 connection to a blackholed server: requests
	// still sent, nothing received since the RTOs began).
	lastRecv   uint64
	sent, recv bool
}

// socket: fields the hot path touches first, so that an event on a known
// socket reads one or two cache lines; its addresses, read only for
// reports, live apart in Correlator.addrs.
type socket struct {
	cookie   uint64
	lastSeen uint64
	proc     *proc // its process while indexed, to skip a map lookup per event
	pid      uint32
	pidPos   int32 // index in its process's socks; -1 when not indexed
	lastGor  int32 // slot of the goroutine its last activity sample or binding named, a hint
	live     bool
	closed   bool
	addrs    bool // local and peer known, with ports: no need to look again
	inbound  bool // accepted: its handshake ended SYN_RECV -> ESTABLISHED (this side the server)
	outbound bool // this side's connect was seen
	act      ring[actIv]
	// actOldEnd bounds the ends of act's older items (all but the
	// newest): the end of the latest one pushed back. A window that
	// starts after it needs only the newest, and the buffer's cache
	// lines stay unread.
	actOldEnd uint64
	hist      ring[tcpRec]
	closedAt  uint64
}

// sockAddrs are a socket's addresses.
type sockAddrs struct {
	local, peer netip.AddrPort
}

// source is where a binding came from.
type source uint8

const (
	srcOther source = iota
	srcKernelG
	srcHTTP
	srcGRPC
	srcDial
	srcActivity // an activity sample that named its goroutine
)

var sourceNames = [...]string{"other", event.BindKernelG, event.BindHTTPRoundTrip, event.BindGRPCStream, event.BindDial, "activity"}

func (s source) String() string { return sourceNames[s] }

func sourceOf(name string) source {
	for i, n := range sourceNames {
		if n == name {
			return source(i)
		}
	}
	return srcOther
}

// continuous reports whether the source samples ongoing I/O, so that close
// samples of one goroutine on one socket merge into a run. Outbound call
// bindings are points: merging two calls would claim the goroutine was on
// that connection between them, when it may have been waiting on a lock.
func (s source) continuous() bool { return s == srcKernelG || s == srcActivity }

type gkey struct {
	pid  uint32
	goid uint64
}

// bindIv: the goroutine did I/O on cookie from first to last (a point for
// a call binding); srcs has a bit per source.
type bindIv struct {
	cookie      uint64
	first, last uint64
	srcs        uint8
}

type goroutine struct {
	key      gkey
	lastSeen uint64
	live     bool
	// run is the current run of the goroutine's own I/O on one socket
	// (kernel_g bindings, activity samples naming it), kept inline because
	// every sample extends it.
	hasRun bool
	run    bindIv
	binds  ring[bindIv] // call bindings (points) and earlier runs
	// evictedLast is the newest end of a binding pushed out of binds: a
	// window that starts before it may have lost its bindings, so their
	// absence there proves nothing.
	evictedLast uint64
}

type proc struct {
	pid   uint32
	socks []int32 // slots of its sockets
	// accepted: a connection the process accepted was seen (a server);
	// its start then bounds no deadline's budget usefully. expiries: its
	// deadlines evaluated so far.
	accepted bool
	expiries uint32
	started  time.Time        // the process start its expiries counted were read with
	gors     map[uint64]int32 // goid → slot of its goroutines with bindings
	lastSeen uint64
	// Activity seen for the process: the activity producer covers it.
	hasActivity   bool
	firstActivity uint64
	// oldConns is how many TCP connections the process held when it was
	// attached (HeldAtAttach), at oldAt: what they did before is unknown.
	oldConns uint32
	oldAt    uint64
	// Outbound-call bindings seen for the process: the call probes cover it.
	hasReq          bool
	reqFirst        uint64
	reqLast         uint64
	reqBindingCount uint64
	// Local time lost, per kind (index event.LocalKind-1), in stream order;
	// localSince is when each kind was first seen (a source watching),
	// localLast when it was last heard from.
	local      [3]ring[localIv]
	hasLocal   [3]bool
	localSince [3]uint64
	localLast  [3]uint64
}

// socketIndex returns the slot of cookie's socket, creating it.
func (c *Correlator) socketIndex(cookie, t uint64) int32 {
	if i, ok := c.sockByCookie.get(cookie); ok {
		return i
	}
	if c.liveSocks >= c.cfg.MaxSockets {
		c.evictSockets()
	}
	var i int32
	if n := len(c.sockFree); n > 0 {
		i = c.sockFree[n-1]
		c.sockFree = c.sockFree[:n-1]
	} else {
		c.socks = append(c.socks, socket{})
		c.addrs = append(c.addrs, sockAddrs{})
		i = int32(len(c.socks) - 1)
	}
	c.addrs[i] = sockAddrs{}
	s := &c.socks[i]
	hist, act := s.hist, s.act
	hist.reset()
	act.reset()
	*s = socket{cookie: cookie, live: true, pidPos: -1, lastGor: -1, lastSeen: t, hist: hist, act: act}
	c.sockByCookie.put(cookie, i)
	c.liveSocks++
	return i
}

// touchSocket records that the socket was seen at t, owned by pid (0:
// unknown), with these addresses (invalid ones are ignored: a closing
// socket has already lost its port).
func (c *Correlator) touchSocket(i int32, pid uint32, local, peer netip.AddrPort, t uint64) {
	s := &c.socks[i]
	if t > s.lastSeen {
		s.lastSeen = t
	}
	if !s.addrs {
		// Once both are known they stay: a closing socket reports its
		// local port as 0 (the kernel released it), which must not
		// overwrite the real one.
		a := &c.addrs[i]
		if local.IsValid() && (!a.local.IsValid() || a.local.Port() == 0) {
			a.local = local
		}
		if peer.IsValid() && (!a.peer.IsValid() || a.peer.Port() == 0) {
			a.peer = peer
		}
		s.addrs = a.local.Port() != 0 && a.peer.Port() != 0
	}
	if pid == 0 {
		pid = s.pid
	}
	if pid != 0 && (pid != s.pid || s.proc == nil) {
		c.unindexSocket(i)
		c.indexSocket(i, pid, t)
	}
	if p := c.socks[i].proc; p != nil && t > p.lastSeen {
		p.lastSeen = t
	}
}

func (c *Correlator) indexSocket(i int32, pid uint32, t uint64) {
	p := c.procFor(pid, t)
	s := &c.socks[i]
	s.pid, s.proc = pid, p
	if s.inbound {
		p.accepted = true
	}
	s.pidPos = int32(len(p.socks))
	p.socks = append(p.socks, i)
}

func (c *Correlator) unindexSocket(i int32) {
	s := &c.socks[i]
	if p := s.proc; p != nil {
		last := len(p.socks) - 1
		moved := p.socks[last]
		p.socks[s.pidPos] = moved
		c.socks[moved].pidPos = s.pidPos
		p.socks = p.socks[:last]
	}
	s.pidPos, s.proc = -1, nil
}

func (c *Correlator) freeSocket(i int32) {
	c.unindexSocket(i)
	s := &c.socks[i]
	c.sockByCookie.del(s.cookie)
	s.live = false
	c.sockFree = append(c.sockFree, i)
	c.liveSocks--
}

// evictSockets makes room by dropping the least recently seen eighth of
// the sockets: a batch, so that a table at its cap sorts once per many
// inserts rather than scanning on each.
func (c *Correlator) evictSockets() {
	idx := c.scratch[:0]
	for i := range c.socks {
		if c.socks[i].live {
			idx = append(idx, int32(i))
		}
	}
	slices.SortFunc(idx, func(a, b int32) int {
		sa, sb := &c.socks[a], &c.socks[b]
		return cmp.Or(cmp.Compare(sa.lastSeen, sb.lastSeen), cmp.Compare(sa.cookie, sb.cookie))
	})
	n := max(1, len(idx)/8)
	for _, i := range idx[:n] {
		c.freeSocket(i)
		c.stats.SocketsEvicted++
	}
	c.scratch = idx[:0]
}

// goroutineIndex returns the slot of goroutine goid of p, creating it.
func (c *Correlator) goroutineIndex(p *proc, goid, t uint64) int32 {
	if i, ok := p.gors[goid]; ok {
		return i
	}
	if c.liveGors >= c.cfg.MaxGoroutines {
		c.evictGoroutines()
	}
	var i int32
	if n := len(c.gorFree); n > 0 {
		i = c.gorFree[n-1]
		c.gorFree = c.gorFree[:n-1]
	} else {
		c.gors = append(c.gors, goroutine{})
		i = int32(len(c.gors) - 1)
	}
	g := &c.gors[i]
	binds := g.binds
	binds.reset()
	*g = goroutine{key: gkey{p.pid, goid}, live: true, lastSeen: t, binds: binds}
	if p.gors == nil {
		p.gors = make(map[uint64]int32)
	}
	p.gors[goid] = i
	c.liveGors++
	return i
}

func (c *Correlator) freeGoroutine(i int32) {
	g := &c.gors[i]
	if p := c.procs[g.key.pid]; p != nil {
		delete(p.gors, g.key.goid)
	}
	g.live = false
	c.gorFree = append(c.gorFree, i)
	c.liveGors--
}

func (c *Correlator) evictGoroutines() {
	idx := c.scratch[:0]
	for i := range c.gors {
		if c.gors[i].live {
			idx = append(idx, int32(i))
		}
	}
	slices.SortFunc(idx, func(a, b int32) int {
		ga, gb := &c.gors[a], &c.gors[b]
		return cmp.Or(cmp.Compare(ga.lastSeen, gb.lastSeen), cmp.Compare(ga.key.pid, gb.key.pid), cmp.Compare(ga.key.goid, gb.key.goid))
	})
	n := max(1, len(idx)/8)
	for _, i := range idx[:n] {
		c.freeGoroutine(i)
		c.stats.GoroutinesEvicted++
	}
	c.gorEvicted, c.lastGorEviction = true, c.now
	c.scratch = idx[:0]
}

// socketGoroutine returns the slot of goroutine goid of p, which an event
// of the socket in slot i names, creating it. The events of one socket
// mostly name the same goroutine again: the slot named last is tried
// before the lookup.
func (c *Correlator) socketGoroutine(i int32, p *proc, goid, t uint64) int32 {
	s := &c.socks[i]
	if g := s.lastGor; g >= 0 && int(g) < len(c.gors) && c.gors[g].live && c.gors[g].key == (gkey{p.pid, goid}) {
		return g
	}
	s.lastGor = c.goroutineIndex(p, goid, t) // creates no socket: s stays valid
	return s.lastGor
}

// bindAt records that the goroutine in slot gi did I/O on cookie at t.
func (c *Correlator) bindAt(gi int32, cookie, t uint64, src source) {
	g := &c.gors[gi]
	if t > g.lastSeen {
		g.lastSeen = t
	}
	bit := uint8(1) << src
	if src.continuous() {
		gap := c.mergeGap()
		if r := &g.run; g.hasRun && r.cookie == cookie && t+gap >= r.first && t <= r.last+gap {
			r.first, r.last, r.srcs = min(r.first, t), max(r.last, t), r.srcs|bit
			return
		}
		if g.hasRun {
			c.pushBinding(g, g.run)
		}
		g.run, g.hasRun = bindIv{cookie: cookie, first: t, last: t, srcs: bit}, true
		return
	}
	// A call binding is a point; an exact repeat comes right after the
	// original.
	if h := g.binds.newest(); h != nil && h.cookie == cookie && h.first == t && h.last == t && h.srcs == bit {
		return
	}
	c.pushBinding(g, bindIv{cookie: cookie, first: t, last: t, srcs: bit})
}

// pushBinding adds b to g's history, remembering what it pushes out.
func (c *Correlator) pushBinding(g *goroutine, b bindIv) {
	if out, ok := g.binds.pushOut(b, c.cfg.MaxBindingsPerGoroutine); ok {
		c.stats.BindingsEvicted++
		g.evictedLast = max(g.evictedLast, out.last)
	}
}

// mergeGap is how far apart two samples of continuous I/O may be and still
// count as one run: the producer's interval plus jitter.
func (c *Correlator) mergeGap() uint64 {
	return uint64(c.cfg.ActivityResolution + c.cfg.ActivityResolution/2)
}

// procFor returns pid's process, creating it.
func (c *Correlator) procFor(pid uint32, t uint64) *proc {
	if p := c.procs[pid]; p != nil {
		return p
	}
	if len(c.procs) >= c.cfg.MaxProcesses {
		c.evictProcesses()
	}
	p := &proc{pid: pid, lastSeen: t}
	c.procs[pid] = p
	return p
}

// evictProcesses drops the least recently seen eighth of the processes
// with their goroutines. Their sockets stay, unindexed, until an event
// names their owner again.
func (c *Correlator) evictProcesses() {
	pids := make([]uint32, 0, len(c.procs))
	for pid := range c.procs {
		pids = append(pids, pid)
	}
	slices.SortFunc(pids, func(a, b uint32) int {
		return cmp.Or(cmp.Compare(c.procs[a].lastSeen, c.procs[b].lastSeen), cmp.Compare(a, b))
	})
	for _, pid := range pids[:max(1, len(pids)/8)] {
		c.dropProcess(pid)
		c.stats.ProcessesEvicted++
	}
}

func (c *Correlator) dropProcess(pid uint32) {
	p := c.procs[pid]
	for _, i := range p.socks {
		c.socks[i].pidPos, c.socks[i].proc = -1, nil
	}
	for _, i := range p.gors {
		c.freeGoroutine(i)
		c.stats.GoroutinesEvicted++
		c.gorEvicted, c.lastGorEviction = true, c.now
	}
	delete(c.procs, pid)
}

// sweep drops what has been idle too long and closed sockets past their
// linger. It runs once per second of stream time; whether an entry goes
// depends only on its own times, so the result does not depend on the
// order of the scan.
func (c *Correlator) sweep(now uint64) {
	idle, linger := uint64(c.cfg.IdleTimeout), uint64(c.cfg.ClosedLinger)
	for i := range c.socks {
		s := &c.socks[i]
		switch {
		case !s.live:
		case s.closed && now > s.closedAt+linger:
			c.freeSocket(int32(i))
			c.stats.SocketsClosed++
		case now > s.lastSeen+idle:
			c.freeSocket(int32(i))
			c.stats.SocketsIdle++
		}
	}
	for i := range c.gors {
		if g := &c.gors[i]; g.live && now > g.lastSeen+idle {
			c.freeGoroutine(int32(i))
			c.stats.GoroutinesIdle++
		}
	}
	for pid, p := range c.procs {
		if len(p.socks) == 0 && len(p.gors) == 0 && now > p.lastSeen+idle {
			c.dropProcess(pid)
			c.stats.ProcessesIdle++
		}
	}
}
