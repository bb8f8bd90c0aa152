package goprobe

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/link"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/gobin"
	"github.com/timeout-tracer/tracer/tick"
)

// NodeConfig tunes a Node.
type NodeConfig struct {
	// PollInterval is the reader's safety net: the programs wake it on
	// every sample, so nothing waits for it. 0 means 1 s.
	PollInterval time.Duration
	Logger       *slog.Logger
	// tap, if set, sees every raw sample of both ring buffers before it is
	// decoded (tests capture real records for the fuzz corpora with it).
	tap func(ring string, raw []byte)
}

// Node owns one set of Go deadline programs, maps and ring buffers for
// any number of processes. Per-process state in the maps is keyed by tgid;
// the cold probes are attached once per executable file (same inode, same
// probes, filtered per process in BPF) and the detail and audit probes per
// process. Events of every process come out of one set of channels.
type Node struct {
	log      *slog.Logger
	clk      collector.Clock
	objs     objects
	reader   *collector.Ring
	bindRd   *collector.Ring
	events   chan event.Deadline
	bindings chan event.Binding
	calls    chan event.Call
	done     chan struct{}
	wg       sync.WaitGroup
	tap      func(ring string, raw []byte)

	// multi: uprobes are uprobe_multi BPF links, not perf events (see
	// collector.UprobeMulti).
	multi bool
	// shared: some cold probes are shared by the processes of a file (Add,
	// the node agent), so an expiry may arrive twice.
	shared atomic.Bool

	mu             sync.Mutex
	procs          map[uint32]*Process
	gone           map[uint32]goneProc // removed recently: late events still decode
	exes           map[gobin.FileID]*sharedCold
	bins           map[gobin.FileID]*binRef // analysed executables, shared by their processes
	swept          uint64
	decodeErrors   uint64
	unknownPID     uint64 // events of processes not (or no longer) traced
	duplicates     uint64 // expiries seen twice (shared probes on one inode), reported once
	lateCookieErrs uint64 // of processes already forgotten
	dup            expirySeen
	callsDropped   uint64
	closeOnce      sync.Once
	closeErr       error
}

// sharedCold are the cold probes of one executable file, attached for every
// process that runs it (no PID filter: the programs skip processes that are
// not registered in go_procs).
type sharedCold struct {
	exe   *link.Executable
	links []link.Link
	refs  int
	// detached: the storm guard took the probes off (SetExeCold); they
	// come back with SetExeCold(true).
	detached bool
}

// binRef is an analysed executable and the number of processes using it:
// its symbol tables, pclntab and DWARF are parsed once per file.
type binRef struct {
	bin  *gobin.Binary
	refs int
}

// openBin returns the analysed executable of process pid, shared with the
// other processes running the same file, and the path to attach this
// process's own probes through.
func (n *Node) openBin(pid int) (*gobin.Binary, string, error) {
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	if st, err := os.Stat(exe); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			id := gobin.FileID{Dev: uint64(sys.Dev), Ino: uint64(sys.Ino)}
			n.mu.Lock()
			if r, ok := n.bins[id]; ok {
				r.refs++
				n.mu.Unlock()
				return r.bin, exe, nil
			}
			n.mu.Unlock()
		}
	}
	bin, err := gobin.OpenPID(pid)
	if err != nil {
		return nil, "", err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if r, ok := n.bins[bin.File]; ok { // another process of the file won the race
		r.refs++
		bin.Close()
		return r.bin, exe, nil
	}
	n.bins[bin.File] = &binRef{bin: bin, refs: 1}
	return bin, bin.AttachPath, nil
}

// closeBin drops a process's reference on its executable.
func (n *Node) closeBin(b *gobin.Binary) error {
	if b == nil {
		return nil
	}
	n.mu.Lock()
	r, ok := n.bins[b.File]
	if ok && r.bin == b {
		r.refs--
		if r.refs > 0 {
			n.mu.Unlock()
			return nil
		}
		delete(n.bins, b.File)
	}
	n.mu.Unlock()
	return b.Close()
}

type goneProc struct {
	p    *Process
	when time.Time
}

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

// goneLinger is how long a removed process's binary is kept for the late
// events of its last moments.
const goneLinger = 5 * time.Second

// NewNode loads the Go deadline programs with no process yet.
func NewNode(cfg NodeConfig) (_ *Node, err error) {
	cfg.Logger = collector.Logger(cfg.Logger)
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Second
	}
	if err := collector.Setup(cfg.Logger); err != nil {
		return nil, err
	}
	n := &Node{
		log:      cfg.Logger,
		clk:      collector.NewClock(0),
		events:   make(chan event.Deadline, 1024),
		bindings: make(chan event.Binding, 4096),
		calls:    make(chan event.Call, 4096),
		done:     make(chan struct{}),
		procs:    make(map[uint32]*Process),
		gone:     make(map[uint32]goneProc),
		exes:     make(map[gobin.FileID]*sharedCold),
		bins:     make(map[gobin.FileID]*binRef),
		tap:      cfg.tap,
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	n.multi = collector.UprobeMulti()
	if err := n.objs.load(n.multi); err != nil {
		return nil, err
	}
	if n.reader, err = collector.NewRing(n.objs.GoEvents); err != nil {
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	if n.bindRd, err = collector.NewRing(n.objs.calls.GoBindings); err != nil {
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	n.wg.Add(3)
	go n.read(cfg.PollInterval)
	go n.readBindings(cfg.PollInterval)
	go n.sweep()
	return n, nil
}

// Add analyses process pid's executable and attaches its cold tier (shared
// with the other processes of the same executable). Errors wrapping
// ErrNotTraceable mean the process cannot be traced (not Go, too old, ...).
func (n *Node) Add(pid int) (*Process, error) {
	n.shared.Store(true)
	return n.add(pid, true)
}

func (n *Node) add(pid int, shared bool) (*Process, error) {
	n.mu.Lock()
	_, dup := n.procs[uint32(pid)]
	n.mu.Unlock()
	if dup {
		return nil, fmt.Errorf("process %d is already traced", pid)
	}
	p := &Process{log: n.log, pid: pid, comm: collector.Comm(pid), clk: n.clk, objs: &n.objs, node: n}
	if err := p.attach(shared); err != nil {
		// attach takes the cold reference last: nothing to release.
		n.forget(uint32(pid))
		n.closeBin(p.bin)
		return nil, err
	}
	n.mu.Lock()
	n.procs[uint32(pid)] = p
	delete(n.gone, uint32(pid))
	n.mu.Unlock()
	return p, nil
}

// Remove detaches process pid (it exited, or is no longer wanted). Its
// binary stays open a few seconds for its last events.
func (n *Node) Remove(pid int) error {
	// Into gone in the same step as out of procs: detaching takes a while
	// (a uprobe link's release waits for an RCU grace period), and the
	// process's last events, read meanwhile, were dropped as of an unknown
	// process (TestDaemonSameImageTwoContainers lost a process's last
	// expiries that way under load).
	n.mu.Lock()
	p, ok := n.procs[uint32(pid)]
	delete(n.procs, uint32(pid))
	if ok {
		n.gone[uint32(pid)] = goneProc{p, time.Now()}
	}
	n.mu.Unlock()
	if !ok {
		return nil
	}
	return p.detach()
}

// Procs returns the traced processes.
func (n *Node) Procs() []*Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*Process, 0, len(n.procs))
	for _, p := range n.procs {
		out = append(out, p)
	}
	return out
}

// Proc returns the traced process pid, or nil.
func (n *Node) Proc(pid int) *Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.procs[uint32(pid)]
}

// Events delivers one event per expired deadline, of every process.
// Closed after Close.
func (n *Node) Events() <-chan event.Deadline { return n.events }

// Bindings delivers request -> connection bindings of every process.
// Closed after Close.
func (n *Node) Bindings() <-chan event.Binding { return n.bindings }

// Calls delivers the outbound calls the call probes saw, of every
// process; calls nobody reads are dropped and counted.
func (n *Node) Calls() <-chan event.Call { return n.calls }

// Executables is the number of executable files whose cold probes are
// attached (each shared by every traced process running it).
func (n *Node) Executables() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.exes)
}

// holdCold attaches the cold sites of p's executable, or takes a reference
// on those already attached for it.
func (n *Node) holdCold(p *Process, shared bool) error {
	if !shared {
		// One process only: filter in the kernel by PID, so other processes
		// running the same file never trap.
		links, err := attachSites(p.cold, func(s site) (link.Link, error) { return p.uprobe(s) })
		if err != nil {
			return err
		}
		sc := &sharedCold{refs: 1, links: links}
		n.mu.Lock()
		n.exes[p.key] = sc
		n.mu.Unlock()
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if sc, ok := n.exes[p.key]; ok {
		sc.refs++
		return nil
	}
	links, err := n.attachShared(p)
	if err != nil {
		return err
	}
	n.exes[p.key] = &sharedCold{exe: p.exe, refs: 1, links: links}
	return nil
}

// attachShared attaches the cold sites of p's executable for every process
// running the file (the node's shared probes).
func (n *Node) attachShared(p *Process) ([]link.Link, error) {
	return attachSites(p.cold, func(s site) (link.Link, error) { return n.attachUprobe(p, s, 0) })
}

// attachSites attaches every site with attach; on an error it detaches
// what it attached.
func attachSites(sites []site, attach func(site) (link.Link, error)) ([]link.Link, error) {
	links := make([]link.Link, 0, len(sites))
	for _, s := range sites {
		l, err := attach(s)
		if err != nil {
			collector.CloseLinks(links)
			return nil, err
		}
		links = append(links, l)
	}
	return links, nil
}

// SetExeCold detaches (off) or reattaches (on) the shared cold probes of
// one executable file, for the node agent's storm guard: their traps cost
// every process running the file, so they come off together. The processes
// stay registered; expiries meanwhile are not seen.
func (n *Node) SetExeCold(key gobin.FileID, on bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	sc, ok := n.exes[key]
	if !ok || sc.detached == !on {
		return nil
	}
	if !on {
		err := collector.CloseLinks(sc.links)
		sc.links, sc.detached = nil, true
		return err
	}
	var p *Process
	for _, q := range n.procs {
		if q.key == key {
			p = q
			break
		}
	}
	if p == nil {
		return fmt.Errorf("reattach the probes of %v: no traced process runs it", key)
	}
	links, err := n.attachShared(p)
	if err != nil {
		return err
	}
	sc.links, sc.detached = links, false
	return nil
}

// attachUprobe attaches program s.prog at s.addr of p's executable, for
// process pid only (0: every process running the file).
func (n *Node) attachUprobe(p *Process, s site, pid int) (link.Link, error) {
	off, err := p.bin.FileOffset(s.addr)
	if err != nil {
		return nil, err
	}
	var l link.Link
	if n.multi {
		l, err = p.exe.UprobeMulti(nil, s.prog, &link.UprobeMultiOptions{Addresses: []uint64{off}, PID: uint32(pid)})
	} else {
		l, err = p.exe.Uprobe("", s.prog, &link.UprobeOptions{Address: off, PID: pid})
	}
	if err != nil {
		if !n.multi && errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("attach %s at %#x: %w (no uprobe_multi links here (kernel before 6.6, or TT_UPROBE=perf), and perf uprobes need CAP_SYS_ADMIN since the 2025 fix \"perf/core: Require CAP_SYS_ADMIN for uprobes\": run as root with CAP_SYS_ADMIN)", s.name, s.addr, err)
		}
		return nil, fmt.Errorf("attach %s at %#x: %w", s.name, s.addr, collector.Explain(err))
	}
	return l, nil
}

// UprobeMulti reports whether this node attaches uprobes as uprobe_multi
// links (else perf events).
func (n *Node) UprobeMulti() bool { return n.multi }

// releaseCold drops p's reference on its executable's cold probes and
// detaches them with the last one.
func (n *Node) releaseCold(p *Process) error {
	n.mu.Lock()
	sc, ok := n.exes[p.key]
	if !ok || p.exe == nil {
		n.mu.Unlock()
		return nil
	}
	sc.refs--
	if sc.refs > 0 {
		n.mu.Unlock()
		return nil
	}
	delete(n.exes, p.key)
	n.mu.Unlock()
	return collector.CloseLinks(sc.links)
}

// forget deletes every map entry of pid.
func (n *Node) forget(pid uint32) {
	if !n.objs.loaded() {
		return
	}
	for _, m := range n.objs.byTgid() {
		m.Delete(pid)
	}
	for _, m := range n.objs.byPidPtr() {
		var keys []godeadlinePidPtr
		var key godeadlinePidPtr
		var prev any // nil: the first key
		for i := 0; i < int(m.MaxEntries()) && m.NextKey(prev, &key) == nil; i++ {
			if key.Pid == pid {
				keys = append(keys, key)
			}
			k := key
			prev = &k
		}
		for _, k := range keys {
			m.Delete(k)
		}
	}
}

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

// sweep removes recorded creations whose deadline passed long ago without
// an expiry: those deadlines were met (cancel runs no probe). Counted. It
// also lets go of the binaries of processes removed a while ago.
func (n *Node) sweep() {
	defer n.wg.Done()
	t := tick.NewTicker(2 * time.Second)
	defer t.Stop()
	m := n.objs.Deadlines
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
			t.Next()
		}
		cutoff := time.Now().Add(-5 * time.Second)
		var key godeadlinePidPtr
		var val godeadlineCreation
		var stale []godeadlinePidPtr
		it := m.Iterate()
		for it.Next(&key, &val) {
			if event.GoTime(val.DeadlineWall, val.DeadlineExt).Before(cutoff) {
				stale = append(stale, key)
			}
		}
		for _, k := range stale {
			if m.Delete(k) == nil {
				n.mu.Lock()
				n.swept++
				n.mu.Unlock()
			}
		}
		n.mu.Lock()
		var old []*Process
		for pid, g := range n.gone {
			if time.Since(g.when) > goneLinger {
				old = append(old, g.p)
				delete(n.gone, pid)
			}
		}
		n.mu.Unlock()
		for _, p := range old {
			n.closeBin(p.bin)
		}
	}
}

// Stats returns the counters of every process of the node.
func (n *Node) Stats() (Stats, error) {
	var s Stats
	if err := collector.Counters(n.objs.GoHits, &s.ExpiryHits, &s.CreateHits, &s.ReturnHits, &s.Dropped, &s.DetailFull, &s.HeaderHits, &s.RequestHits, &s.SpanHits, &s.RoundTripHits,
		&s.GRPCHeaderHits, &s.GRPCStreamHits, &s.DialHits, &s.NewprocHits); err != nil {
		return s, fmt.Errorf("read Go probe stats: %w", err)
	}
	n.mu.Lock()
	s.Swept, s.DecodeErrors, s.Duplicates, s.UnknownPID = n.swept, n.decodeErrors, n.duplicates, n.unknownPID
	procs := make([]*Process, 0, len(n.procs)+len(n.gone))
	for _, p := range n.procs {
		procs = append(procs, p)
	}
	for _, g := range n.gone {
		procs = append(procs, g.p)
	}
	s.LateCookieErrors = n.lateCookieErrs
	n.mu.Unlock()
	var err error
	if s.Missed, err = collector.Missed(n.objs.programs()...); err != nil {
		return s, fmt.Errorf("read Go probe program stats: %w", err)
	}
	for _, p := range procs {
		p.mu.Lock()
		s.LateCookieErrors += p.ext.lateCookieErrs
		p.mu.Unlock()
	}
	return s, nil
}

// Close detaches every process and frees everything: stop the readers
// (closing a ring buffer unblocks its reader), wait for the goroutines,
// detach, then the collection. Safe to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		close(n.done)
		var errs []error
		if n.reader != nil {
			errs = append(errs, n.reader.Close())
		} else {
			close(n.events)
		}
		if n.bindRd != nil {
			errs = append(errs, n.bindRd.Close())
		} else {
			close(n.bindings)
		}
		n.wg.Wait()
		n.mu.Lock()
		procs := n.procs
		n.procs = map[uint32]*Process{}
		gone := n.gone
		n.gone = map[uint32]goneProc{}
		n.mu.Unlock()
		for _, p := range procs {
			errs = append(errs, p.detach())
			errs = append(errs, n.closeBin(p.bin))
		}
		for _, g := range gone {
			errs = append(errs, n.closeBin(g.p.bin))
		}
		n.objs.close()
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}
