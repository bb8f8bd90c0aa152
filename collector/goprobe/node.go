package goprobe

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
	notExpired     uint64 // doCancel reports of contexts not expiring (Stats.NotExpired)
	unknownPID     uint64 // events of processes not (or no longer) traced
	duplicates     uint64 // expiries seen twice (shared probes on one inode), reported once
	lateCookieErrs uint64 // of processes already forgotten
	dup            expirySeen
	callsDropped   uint64
	closing        bool // Close has begun: executables close with their last process
	closeOnce      sync.Once
	closeErr       error
}

type goneProc struct {
	p    *Process
	when time.Time
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
func (n *Node) Add(pid int) (*Process, error) { return n.AddBefore(pid, nil) }

// AddBefore is Add, with before called once the executable is analysed
// and before the process's expiries are seen (Config.BeforeAttach). Its
// error is returned, and nothing is left attached.
func (n *Node) AddBefore(pid int, before func() error) (*Process, error) {
	n.shared.Store(true)
	return n.add(pid, true, before)
}

func (n *Node) add(pid int, shared bool, before func() error) (*Process, error) {
	n.mu.Lock()
	_, dup := n.procs[uint32(pid)]
	n.mu.Unlock()
	if dup {
		return nil, fmt.Errorf("process %d is already traced", pid)
	}
	p := &Process{log: n.log, pid: pid, comm: collector.Comm(pid), clk: n.clk, objs: &n.objs, node: n}
	if err := p.attach(shared, before); err != nil {
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

// UprobeMulti reports whether this node attaches uprobes as uprobe_multi
// links (else perf events).
func (n *Node) UprobeMulti() bool { return n.multi }

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
		n.sweepBins(time.Now())
	}
}

// Stats returns the counters of every process of the node.
func (n *Node) Stats() (Stats, error) {
	var s Stats
	if err := collector.Counters(n.objs.GoHits, &s.ExpiryHits, &s.CreateHits, &s.ReturnHits, &s.Dropped, &s.DetailFull, &s.HeaderHits, &s.RequestHits, &s.SpanHits, &s.RoundTripHits,
		&s.GRPCHeaderHits, &s.GRPCStreamHits, &s.DialHits, &s.NewprocHits, &s.Raced, &s.Stale, &s.StaleTrace, &s.ClientTimerHits, &s.Merged, &s.GRPCTimerHits, &s.DialTimerHits, &s.ColdRuns); err != nil {
		return s, fmt.Errorf("read Go probe stats: %w", err)
	}
	n.mu.Lock()
	s.Swept, s.DecodeErrors, s.Duplicates, s.UnknownPID = n.swept, n.decodeErrors, n.duplicates, n.unknownPID
	s.NotExpired = n.notExpired
	s.ExpiryHits -= min(s.ExpiryHits, s.NotExpired)
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
		s.WaitStale += p.ext.waitStale
		s.WaitNoCookie += p.ext.waitNoCookie
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
		n.closing = true
		procs := n.procs
		n.procs = map[uint32]*Process{}
		gone := n.gone
		n.gone = map[uint32]goneProc{}
		var idle []*gobin.Binary
		for id, r := range n.bins {
			if r.refs == 0 {
				idle = append(idle, r.bin)
				delete(n.bins, id)
			}
		}
		n.mu.Unlock()
		for _, p := range procs {
			errs = append(errs, p.detach())
			errs = append(errs, n.closeBin(p.bin))
		}
		for _, g := range gone {
			errs = append(errs, n.closeBin(g.p.bin))
		}
		for _, b := range idle {
			errs = append(errs, b.Close())
		}
		n.objs.close()
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// Progress is the monotonic time before which every expiry has been sent
// on Events (the merge's watermark for that source; 0 before the first
// read).
func (n *Node) Progress() uint64 { return n.reader.Progress() }

// BindingsProgress is the same for Bindings and Calls, which come from one
// ring.
func (n *Node) BindingsProgress() uint64 { return n.bindRd.Progress() }

// Kick makes both readers look at their rings now instead of at their next
// polls.
func (n *Node) Kick() {
	n.reader.Kick()
	n.bindRd.Kick()
}
