package goprobe

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/gobin"
)

// Config tunes the Go deadline probes.
type Config struct {
	PID int
	// PollInterval is the reader's safety net (see NodeConfig); 0 means
	// 1 s.
	PollInterval time.Duration
	Logger       *slog.Logger
	// tap, if set, sees every raw sample of both ring buffers before it is
	// decoded (tests capture real records for the fuzz corpora with it).
	tap func(ring string, raw []byte)
	// BeforeAttach, if set, runs once the executable is analysed and
	// before the process is registered with the probes (from then on its
	// expiries are seen): what has to be read of the process before that
	// moment is read there (its sockets' state, which the expiries close).
	// Its error is returned, and nothing is left attached.
	BeforeAttach func() error
}

// Stats are the probes' counters.
type Stats struct {
	ExpiryHits     uint64 // cold-tier probe hits (expiries, and nothing else)
	CreateHits     uint64 // detail-tier hits: WithDeadlineCause entries
	ReturnHits     uint64 // detail-tier hits: WithDeadlineCause returns
	Dropped        uint64 // expiries lost: ring buffer full
	DetailFull     uint64 // creations not recorded: table full
	HeaderHits     uint64 // detail-tier hits: net/http header keys parsed (inbound traceparent)
	RequestHits    uint64 // detail-tier hits: net/http requests read
	SpanHits       uint64 // detail-tier hits: OpenTelemetry spans started
	RoundTripHits  uint64 // detail-tier hits: net/http client round trips
	GRPCHeaderHits uint64 // detail-tier hits: gRPC server HEADERS frames (inbound metadata)
	GRPCStreamHits uint64 // detail-tier hits: gRPC client streams opened
	DialHits       uint64 // detail-tier hits: connects (entry, after connect(2), returns)
	NewprocHits    uint64 // detail-tier hits: goroutines started (runtime.newproc1 entry and returns)
	Raced          uint64 // timers that fired on a context a parent's expiry had cancelled (that expiry is reported), or, where the binary's types are unknown, one the program had
	// ClientTimerHits counts runs of net/http's doCancel (the probe on
	// the timer net/http arms for Client.Timeout over a RoundTripper not
	// its own): that timer fired, or the program closed the request's
	// Cancel channel. Not expiries by themselves: an expiry they report is
	// in ExpiryHits.
	ClientTimerHits uint64
	// Merged counts the second of a deadline's two timers (net/http's
	// Client.Timeout timer and the context's own): one expiry, seen and
	// reported at the first; not in ExpiryHits.
	Merged uint64
	// NotExpired counts doCancel runs that reported a context whose
	// deadline had not passed (the program closed Request.Cancel itself):
	// dropped, and taken out of ExpiryHits.
	NotExpired uint64
	// GRPCTimerHits counts runs of grpc-go's server deadline timer (the
	// probe on its closure): a call's deadline passed on the server. Not
	// expiries by themselves: an expiry they report is in ExpiryHits.
	GRPCTimerHits uint64
	// DialTimerHits counts socket write deadlines that fired (the probe on
	// runtime.netpollWriteDeadline): a dial's deadline, set from its
	// context, passed (or a program's own write deadline). Not expiries by
	// themselves: an expiry they report is in ExpiryHits.
	DialTimerHits uint64
	// ColdRuns counts every run of a cold-tier probe: its traps. One per
	// expiry seen, plus the second timer of a deadline that has two
	// (merged), plus second timers that reported nothing (doCancel on a
	// request the program cancelled, a write deadline of no dial).
	ColdRuns uint64
	// Stale counts creation and child-span records left by a context
	// whose deadline was met, found at the address of a later one when it
	// expired (their deadlines differ) and not used: they would have given
	// it the earlier request's creation, goroutine and trace.
	Stale uint64
	// StaleTrace counts creations that did not take the traceparent their
	// goroutine inherited: it could not be shown to be their request's
	// (godeadline.bpf.c, inherited_current).
	StaleTrace       uint64
	Swept            uint64 // recorded creations removed because their deadline passed unseen (met in time)
	DecodeErrors     uint64
	LateCookieErrors uint64 // bound connections whose cookie could not be asked of the kernel (see lateCookie)
	// Waiting frames read at an expiry but not used: the receiver's spill
	// slot was not live at the frame's pc (WaitStale; also a budget frame's
	// receiver or request, and the frame an inbound connection's reader was
	// found through), or the socket had no
	// cookie yet, no kernel hook having seen it (WaitNoCookie).
	WaitStale, WaitNoCookie uint64
	Duplicates              uint64 // expiries delivered twice by probes shared through overlayfs, reported once
	UnknownPID              uint64 // events of a process not traced (any more): dropped
	// Missed counts probe runs the kernel skipped because a BPF program of
	// the kprobe family was already running on that CPU (its recursion
	// guard); a skipped expiry probe is an expiry not reported.
	Missed uint64
}

// Process traces the context deadline expiries of one Go process: the cold
// tier is attached for its whole life; the detail tier on demand. Its BPF
// programs, maps and ring buffers belong to a Node that may serve many
// processes (the node agent); Start makes a private one.
type Process struct {
	log  *slog.Logger
	pid  int
	comm string
	bin  *gobin.Binary
	clk  collector.Clock
	objs *objects // the node's
	node *Node
	own  bool // Start's private node: Close closes it
	exe  *link.Executable
	key  gobin.FileID // the executable's inode: cold probes are shared by it

	bias uint64 // PIE load bias: runtime PC - bias = link-time PC

	// detail sites, resolved once
	cold      []site
	entry     uint64
	returns   []uint64
	httpSites []site // inbound traceparent of net/http servers; none without net/http
	spanSites []site // spans started below a deadline; none without the OTel SDK
	tripSites []site // net/http client round trips: request -> connection
	// waitersRead: the expiry probe reads who waits on the context.
	waitersRead bool
	otel        *gobin.OTelLayout
	ext         extProbes // gRPC, dial and goroutine probes (grpc.go, dial.go)

	otelErr   error // why there is no OpenTelemetry walk
	ctxWalk   bool  // context itabs are registered: the walk can find deadlines
	mu        sync.Mutex
	detail    []link.Link
	audit     []link.Link // call probes attached by SetAudit
	closeOnce sync.Once
	closeErr  error
}

// ErrNotTraceable is wrapped when the target cannot be traced (not Go, too
// old, no context package in it, ...); the message says why.
var ErrNotTraceable = errors.New("cannot trace this process")

// Start analyses the process's executable, loads the deadline programs
// and attaches the cold tier, for this process only. On error nothing is
// left attached.
func Start(cfg Config) (*Process, error) {
	n, err := NewNode(NodeConfig{PollInterval: cfg.PollInterval, Logger: cfg.Logger, tap: cfg.tap})
	if err != nil {
		return nil, err
	}
	p, err := n.add(cfg.PID, false, cfg.BeforeAttach)
	if err != nil {
		n.Close()
		return nil, err
	}
	p.own = true
	return p, nil
}

// attach analyses the process's binary, calls before (if not nil),
// registers the process with the BPF maps and attaches its cold tier
// (shared with other processes of the same executable when shared is set).
// On error it undoes what it did.
func (p *Process) attach(shared bool, before func() error) (err error) {
	t0 := time.Now()
	bin, attachPath, err := p.node.openBin(p.pid)
	if err != nil {
		return fmt.Errorf("%w: process %d: %w", ErrNotTraceable, p.pid, err)
	}
	p.bin, p.key = bin, bin.File
	if p.bias, err = loadBias(p.pid, bin); err != nil {
		p.log.Warn("creators will not be symbolized", "pid", p.pid, "err", err)
	}
	t1 := time.Now()
	offs, err := p.resolve()
	if err != nil {
		return fmt.Errorf("%w: process %d (%s, %s): %w", ErrNotTraceable, p.pid, bin.ExePath, bin.GoVersion, err)
	}
	t2 := time.Now()
	if before != nil {
		if err := before(); err != nil {
			return err
		}
	}
	t3 := time.Now()
	defer func() {
		if err == nil {
			p.log.Debug("attach phases", "pid", p.pid, "open", t1.Sub(t0), "resolve", t2.Sub(t1), "before", t3.Sub(t2), "register_and_probes", time.Since(t3))
		}
	}()
	if err := p.objs.GoProcs.Put(uint32(p.pid), offs); err != nil {
		return fmt.Errorf("register process %d: %w", p.pid, err)
	}
	if err := p.registerOTel(); err != nil {
		return err
	}
	if err := p.registerExt(); err != nil {
		return err
	}
	if p.exe, err = link.OpenExecutable(attachPath); err != nil {
		return fmt.Errorf("open executable %s: %w", attachPath, err)
	}
	return p.node.holdCold(p, shared)
}

// resolve finds the probe sites and the struct offsets in the binary.
func (p *Process) resolve() (godeadlineTtGoOffsets, error) {
	var offs godeadlineTtGoOffsets
	defer p.bin.PrefetchDWARF()()
	ds, err := p.bin.DeadlineSites()
	if err != nil {
		return offs, err
	}
	cancel, err := p.bin.Func("context.(*timerCtx).cancel")
	if err != nil {
		return offs, err
	}
	fired, err := p.bin.CallSites(ds.Timer, cancel)
	if err != nil {
		return offs, fmt.Errorf("find the cancel call in %s: %w", ds.Timer.Name, err)
	}
	if len(fired) == 0 {
		return offs, fmt.Errorf("no cancel call in the timer closure %s", ds.Timer.Name)
	}
	var sites []site
	for _, a := range fired {
		sites = append(sites, site{"go_timer_fired", p.objs.GoTimerFired, a})
	}
	for _, c := range ds.CancelCalls {
		if c.Expired {
			sites = append(sites, site{"go_expired_at_creation", p.objs.GoExpiredAtCreation, c.Addr})
		}
	}
	p.cold = sites
	if p.entry, err = p.bin.AfterPrologue(ds.Constructor); err != nil {
		return offs, err
	}
	if p.returns, err = p.bin.Returns(ds.Constructor); err != nil || len(p.returns) == 0 {
		return offs, fmt.Errorf("find the returns of %s: %v", ds.Constructor.Name, err)
	}
	p.httpSites = p.resolveHTTP()
	p.httpSites = append(p.httpSites, p.resolveHTTP2Servers(&offs)...)
	p.resolveOTel(&offs)
	p.resolveWrappers()
	p.resolveRoundTrip(&offs)
	p.resolveClientTimer(&offs)
	p.resolveExt()
	if offs.TcpconnItab == 0 && p.ext.grpc.TcpconnItab != 0 {
		// No net/http client: the expiry probe's gRPC waiting frames
		// follow the connection with the gRPC probes' chain.
		offs.TcpconnItab, offs.ConnFd, offs.NetfdSysfd = p.ext.grpc.TcpconnItab, p.ext.grpc.ConnFd, p.ext.grpc.NetfdSysfd
	}
	p.resolveDialWait(&offs)
	p.resolveDeadlineErr(&offs)
	p.resolveWaiters(&offs)
	for _, f := range []struct {
		typ, path string
		dst       *uint32
	}{
		{"context.timerCtx", "deadline", &offs.TimerctxDeadline},
		{"context.cancelCtx", "err", &offs.CancelctxErr},
		{"context.cancelCtx", "children", &offs.CancelctxChildren},
		{"runtime.g", "goid", &offs.G_goid},
	} {
		off, err := p.bin.FieldOffset(f.typ, f.path)
		if err != nil {
			return offs, err
		}
		*f.dst = uint32(off)
	}
	return offs, nil
}

// SetDetail attaches (on) or detaches (off) the detail tier: a uprobe at
// WithDeadlineCause's entry and at each of its returns. It costs a trap on
// every deadline the process sets.
func (p *Process) SetDetail(on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == (p.detail != nil) {
		return nil
	}
	if !on {
		err := collector.CloseLinks(p.detail)
		p.detail = nil
		return err
	}
	var ls []link.Link
	attach := func(s site) error {
		l, err := p.uprobe(s)
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return err
		}
		ls = append(ls, l)
		return nil
	}
	for _, a := range p.returns {
		if err := attach(site{"go_create_ret", p.objs.GoCreateRet, a}); err != nil {
			return err
		}
	}
	sites := append(append([]site(nil), p.httpSites...), p.spanSites...)
	for _, s := range p.ext.sites {
		if s.prog != p.objs.calls.GoGrpcNewStream { // a call site: below
			sites = append(sites, s)
		}
	}
	if p.audit == nil { // the audit's call probes already see every call
		sites = append(sites, p.callSites()...)
	}
	for _, s := range sites {
		if err := attach(s); err != nil {
			return err
		}
	}
	// Entry last: a record is only made once its returns are watched.
	if err := attach(site{"go_create_entry", p.objs.GoCreateEntry, p.entry}); err != nil {
		return err
	}
	p.detail = ls
	return nil
}

// Detail reports whether the detail tier is attached.
func (p *Process) Detail() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.detail != nil
}

// Events delivers one event per expired deadline, of every process of the
// node. Closed after the node closes.
func (p *Process) Events() <-chan event.Deadline { return p.node.events }

// Binary is the analysed executable of the traced process.
func (p *Process) Binary() *gobin.Binary { return p.bin }

// Node is the programs and maps the process is traced with.
func (p *Process) Node() *Node { return p.node }

// Key is the executable file the process runs (device, inode): the cold
// probes are shared by the processes with the same key.
func (p *Process) Key() gobin.FileID { return p.key }

// PID is the traced process.
func (p *Process) PID() int { return p.pid }

// ColdProbes is the number of uprobes of the cold tier (the deadline
// expiry probes), attached for the process's whole life.
func (p *Process) ColdProbes() int { return len(p.cold) }

// Stats returns the probes' counters: the node's, which are this
// process's when it has the node to itself (Start).
func (p *Process) Stats() (Stats, error) { return p.node.Stats() }

// ExpiryRunStats is the kernel's run count and cumulative run time of the
// expiry probe (go_timer_fired, the node's: every traced process's), counted
// only while collector.EnableRunStats is in effect: what an expiry costs in
// the kernel, benchmarks only.
func (p *Process) ExpiryRunStats() (uint64, time.Duration, error) {
	st, err := p.objs.GoTimerFired.Stats()
	if err != nil {
		return 0, 0, fmt.Errorf("read stats of go_timer_fired: %w", err)
	}
	return st.RunCount, st.Runtime, nil
}

// Close detaches every probe of the process and forgets it; with Start's
// private node it frees the node too. Safe to call more than once.
func (p *Process) Close() error {
	p.closeOnce.Do(func() {
		if p.own {
			p.closeErr = p.node.Close()
			return
		}
		p.closeErr = p.node.Remove(p.pid)
	})
	return p.closeErr
}

// detach undoes attach: probes, map entries, the binary. Called by the
// node with the process out of its table.
func (p *Process) detach() error {
	errs := []error{p.SetDetail(false), p.SetAudit(false), p.node.releaseCold(p)}
	p.node.forget(uint32(p.pid))
	return errors.Join(errs...)
}

// UprobeHits is the number of uprobe traps the process has taken from these
// probes: what a request pays.
func (s Stats) UprobeHits() uint64 {
	return s.ColdRuns + s.CreateHits + s.ReturnHits + s.HeaderHits + s.RequestHits + s.SpanHits + s.RoundTripHits +
		s.GRPCHeaderHits + s.GRPCStreamHits + s.DialHits + s.NewprocHits
}

// Bindings delivers request -> connection bindings seen by the detail
// tier, of every process of the node. Closed after the node closes.
func (p *Process) Bindings() <-chan event.Binding { return p.node.bindings }

// Calls delivers every outbound call the call probes saw (detail tier or
// SetAudit), with what its context allowed. Calls nobody reads are
// dropped and counted.
func (p *Process) Calls() <-chan event.Call { return p.node.calls }

// resolveDeadlineErr finds context.DeadlineExceeded's type and its itab as
// an error: a timer that fires on a context whose err already holds it was
// cancelled by a parent's expiry (reported there), any other err by the
// program after the deadline had passed (reported here). Without them,
// neither is reported, and both are counted (Stats.Raced).
func (p *Process) resolveDeadlineErr(offs *godeadlineTtGoOffsets) {
	itabs, err := p.bin.Itabs()
	if err != nil {
		p.log.Info("expiries cancelled by the program just after their deadline are counted, not reported", "err", err)
		return
	}
	for _, it := range itabs {
		if it.Type.Name == "context.deadlineExceededError" && it.Interface.Name == "error" {
			offs.DeadlineErrItab, offs.DeadlineErrType = it.Addr+p.bias, it.TypeAddr+p.bias
			return
		}
	}
	p.log.Info("expiries cancelled by the program just after their deadline are counted, not reported: no itab of context.deadlineExceededError")
}
