// Package pipeline joins the kernel TCP collector and the Go deadline
// probes of one process into a single time-ordered event stream, and feeds
// it to the correlator (and, when recording, to a file). It owns the
// adaptive detail tier. cmd/tracer's trace and record commands use it.
package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/timeout-tracer/tracer/collector/goprobe"
	"github.com/timeout-tracer/tracer/collector/tcp"
	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/gobin"
	"github.com/timeout-tracer/tracer/pipeline/adaptive"
	"github.com/timeout-tracer/tracer/pipeline/storm"
	"github.com/timeout-tracer/tracer/tick"
	"github.com/timeout-tracer/tracer/workload"
)

// Config says what to trace and how.
type Config struct {
	PID int
	// Detail is "auto", "always" or "never".
	Detail string
	Policy adaptive.Policy
	// Activity is the kernel activity interval: how finely the process's
	// socket use (and the goroutine doing it) is sampled. 0 means 1 s.
	Activity time.Duration
	// Audit attaches the outbound-call probes for the whole run and
	// reports calls made with no deadline at all.
	Audit bool
	// HangAfter (with Audit) reports a call without a deadline still
	// waiting this long as hung. 0 means 10 s.
	HangAfter time.Duration
	// Local: the local-cause sources (CPU throttling, run-queue delay, GC
	// pauses).
	Local LocalConfig
	// Storm is the storm guard's policy (see package storm) for a process
	// traced alone (Start); the zero value disables it.
	Storm  storm.Policy
	Logger *slog.Logger
}

// Sink receives what the pipeline produces, in order.
type Sink struct {
	// Event, if set, gets every event of the merged stream (recording).
	Event func(event.Any) error
	// Report, if set, gets every correlated report.
	Report func(*correlate.Report) error
	// Detail gets each switch of a process's detail tier.
	Detail func(t time.Time, pid uint32, on bool, reason string) error
	// Missing gets each outbound call made under a context with no
	// deadline (Config.Audit), with the peer when the connection is known.
	Missing func(c *event.Call, peer string) error
	// Hung gets a call without a deadline still waiting after
	// Config.HangAfter, with the last kernel event of its connection (nil
	// when none was seen).
	Hung func(c *event.Call, peer string, waiting time.Duration, conn *event.TCP) error
	// TCP, if set, gets every kernel TCP event of the merged stream
	// (activity samples included), in time order: metrics.
	TCP func(*event.TCP) error
	// Call, if set, gets every outbound call the call probes see
	// (Config.Audit), with or without a deadline, as it arrives: metrics.
	Call func(*event.Call) error
	// Storm, if set, gets each switch of the storm guard: on = probes
	// detached (expiries not seen until off).
	Storm func(t time.Time, pid uint32, on bool, reason string) error
}

// Pipeline is one traced process (Start), or every traced process of the
// node (StartNode): both collectors, the merge, the correlator. Close it
// once.
type Pipeline struct {
	cfg  Config
	log  *slog.Logger
	tcp  *tcp.Collector
	goP  *goprobe.Process // Start: the process
	goN  *goprobe.Node
	node bool
	corr *correlate.Correlator
	buf  []event.Any

	mu    sync.Mutex
	procs map[uint32]*procState
	added []uint32 // processes added since Run last looked: watch their activity
	sink  Sink
	drops uint64
	// peers names the connections the kernel reported, for audit lines:
	// cookie -> peer address. Bounded: cleared when full.
	peers map[uint64]string
	// lastTCP is the last kernel event of each connection (bounded like
	// peers), for the network state of hung calls.
	lastTCP map[uint64]event.TCP
	// missing are calls without a deadline waiting for release.
	missing []event.Call
	// open are the calls without a deadline still in flight, by goroutine.
	open map[callKey]*openCall
	// local are the local-cause sources.
	local local
	// guard is the storm guard (Start only; nil when off); guardAt when it
	// last looked; stormSnap its counters for other goroutines.
	guard     *storm.Guard
	guardAt   time.Time
	stormMu   sync.Mutex
	stormSnap storm.Stats
	// exeGuards are node mode's storm guards, one per executable file
	// (Run's goroutine only); goneStorm the counters of guards whose
	// processes all ended.
	exeGuards map[gobin.FileID]*exeGuard
	goneStorm storm.Stats
}

// procState is one traced process: its probes and its adaptive switch.
type procState struct {
	probes *goprobe.Process
	ctl    *adaptive.Controller
	// goidOff is runtime.g.goid's offset in the binary (-1: unknown). The
	// kernel's send/receive hooks read the goroutine doing the I/O only
	// while the detail tier is on: a goroutine binding is used only for a
	// context whose creating goroutine the detail probes saw, and reading
	// it is ~half of those hooks' cost on every request.
	goidOff int64
}

type callKey struct {
	pid  uint32
	goid uint64
}

type openCall struct {
	call     event.Call
	reported bool
}

// maxOpen bounds the calls without a deadline tracked for hung_call.
const maxOpen = 65536

// missingPeerWait is how long a deadline_missing line waits for its
// connection's peer when the kernel has not named it yet: a connection
// opened before the tracer is learnt from its first send, which comes just
// after the call's probe (seen: a gRPC client's first call reported with
// no target, under load).
const missingPeerWait = 300 * time.Millisecond

func (p *Pipeline) releaseMissing(upTo uint64) error {
	slices.SortStableFunc(p.missing, func(a, b event.Call) int { return cmp.Compare(a.Mono, b.Mono) })
	n := 0
	for ; n < len(p.missing) && p.missing[n].Mono <= upTo; n++ {
		c := &p.missing[n]
		if _, known := p.peers[c.Cookie]; !known && c.Cookie != 0 && upTo-c.Mono < uint64(missingPeerWait) {
			break // in order: the later ones wait with it
		}
		if err := p.sink.Missing(c, p.peers[c.Cookie]); err != nil {
			return err
		}
	}
	p.missing = append(p.missing[:0], p.missing[n:]...)
	return nil
}

const maxPeers = 65536

func (p *Pipeline) notePeer(ev *event.TCP) {
	if ev.Cookie == 0 || !ev.Peer.IsValid() || ev.Peer.Port() == 0 {
		return
	}
	if p.peers == nil || len(p.peers) >= maxPeers {
		p.peers = make(map[uint64]string)
		p.lastTCP = make(map[uint64]event.TCP)
	}
	p.peers[ev.Cookie] = ev.Peer.String()
	if !ev.Kind.Lifecycle() {
		p.lastTCP[ev.Cookie] = *ev
	}
}

// trackCall keeps the calls without a deadline in flight, for hung_call.
func (p *Pipeline) trackCall(c *event.Call) {
	k := callKey{c.PID, c.Goid}
	if c.End {
		delete(p.open, k)
		return
	}
	if c.HasDeadline || p.sink.Hung == nil || c.Kind != "http" {
		return // only net/http calls have an end probe: a gRPC stream may live long
	}
	if p.open == nil {
		p.open = make(map[callKey]*openCall)
	}
	if len(p.open) >= maxOpen {
		p.log.Warn("too many calls without a deadline in flight: hung_call tracking restarted", "tracked", len(p.open))
		clear(p.open)
	}
	p.open[k] = &openCall{call: *c}
}

// reportHung says, once per call, which calls without a deadline have
// been waiting longer than HangAfter.
func (p *Pipeline) reportHung(now time.Time) error {
	hang := p.cfg.HangAfter
	if hang == 0 {
		hang = 10 * time.Second
	}
	for _, oc := range p.open {
		if oc.reported || now.Sub(oc.call.Time) < hang {
			continue
		}
		oc.reported = true
		var conn *event.TCP
		if t, ok := p.lastTCP[oc.call.Cookie]; ok {
			conn = &t
		}
		if err := p.sink.Hung(&oc.call, p.peers[oc.call.Cookie], now.Sub(oc.call.Time), conn); err != nil {
			return err
		}
	}
	return nil
}

// reorder is how long events wait to be merged: the two ring buffers are
// read on their own schedules (each polls within 100 ms).
const reorder = 250 * time.Millisecond

// Start attaches everything for process cfg.PID. On error nothing is left
// attached.
func Start(cfg Config, sink Sink) (_ *Pipeline, err error) {
	p := newPipeline(cfg, sink)
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.goP, err = goprobe.Start(goprobe.Config{PID: cfg.PID, Logger: p.log}); err != nil {
		return nil, err
	}
	p.goN = p.goP.Node()
	if p.tcp, err = tcp.Start(tcp.Config{PID: uint32(cfg.PID), Lifecycle: true,
		ActivityInterval: p.cfg.Activity, Logger: p.log}); err != nil {
		return nil, fmt.Errorf("start the kernel TCP collector: %w", err)
	}
	if err := p.corrStart(); err != nil {
		return nil, err
	}
	if err := p.startLocal(); err != nil {
		return nil, err
	}
	if err := p.track(p.goP); err != nil {
		return nil, err
	}
	if cfg.Storm.MaxHitsPerSec > 0 {
		p.guard = storm.New(cfg.Storm)
	}
	return p, nil
}

// StartNode attaches the kernel TCP collector for the whole node and loads
// the Go probes with no process yet: add them with AddProcess. cfg.PID is
// ignored. On error nothing is left attached.
func StartNode(cfg Config, sink Sink) (_ *Pipeline, err error) {
	p := newPipeline(cfg, sink)
	p.node = true
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.goN, err = goprobe.NewNode(goprobe.NodeConfig{Logger: p.log}); err != nil {
		return nil, err
	}
	if p.tcp, err = tcp.Start(tcp.Config{Lifecycle: true, ActivityInterval: p.cfg.Activity, Logger: p.log}); err != nil {
		return nil, fmt.Errorf("start the kernel TCP collector: %w", err)
	}
	if err := p.corrStart(); err != nil {
		return nil, err
	}
	if err := p.startLocal(); err != nil {
		return nil, err
	}
	return p, nil
}

func newPipeline(cfg Config, sink Sink) *Pipeline {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Activity == 0 {
		cfg.Activity = time.Second
	}
	return &Pipeline{cfg: cfg, log: cfg.Logger, sink: sink, procs: make(map[uint32]*procState)}
}

func (p *Pipeline) corrStart() (err error) {
	ccfg := correlate.DefaultConfig()
	ccfg.ActivityResolution = p.cfg.Activity
	p.corr, err = correlate.New(ccfg)
	return err
}

// AddProcess starts tracing process pid (StartNode). Errors wrapping
// goprobe.ErrNotTraceable mean it cannot be traced; nothing is left
// attached for it then.
func (p *Pipeline) AddProcess(pid int) (*goprobe.Process, error) {
	g, err := p.goN.Add(pid)
	if err != nil {
		return nil, err
	}
	if err := p.track(g); err != nil {
		p.goN.Remove(pid)
		return nil, err
	}
	return g, nil
}

// RemoveProcess stops tracing process pid (it exited): its probes are
// detached; its deadlines already seen are still reported.
func (p *Pipeline) RemoveProcess(pid int) error {
	p.mu.Lock()
	_, ok := p.procs[uint32(pid)]
	delete(p.procs, uint32(pid))
	p.mu.Unlock()
	if !ok {
		return nil
	}
	return errors.Join(p.goN.Remove(pid), p.tcp.UnregisterGoProcess(uint32(pid)), p.untrackLocal(uint32(pid)))
}

// Traced reports whether pid is traced.
func (p *Pipeline) Traced(pid uint32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.procs[pid]
	return ok
}

// track registers a process whose Go probes are attached: goroutine
// naming in the kernel, audit and detail as configured.
func (p *Pipeline) track(g *goprobe.Process) error {
	pid := uint32(g.PID())
	ps := &procState{probes: g, ctl: adaptive.New(p.cfg.Policy), goidOff: -1}
	if off, err := g.Binary().FieldOffset("runtime.g", "goid"); err == nil {
		ps.goidOff = int64(off)
	}
	// Connections its listeners accept are attributed to the process from
	// their handshake (the kernel side records listeners at listen(); these
	// predate the collector).
	if n, err := p.tcp.AdoptListeners(pid, workload.CgroupID(int(pid), p.cfg.Local.CgroupRoot)); err != nil {
		p.log.Warn("listening sockets not adopted: connections they accept are attributed at their first send", "pid", pid, "err", err)
	} else if n > 0 {
		p.log.Debug("listening sockets adopted", "pid", pid, "listeners", n)
	}
	if p.cfg.Audit {
		if err := g.SetAudit(true); err != nil {
			if !p.node {
				return err
			}
			p.log.Warn("no deadline audit for this process", "pid", pid, "err", err)
		}
	}
	if p.cfg.Detail == "always" {
		if err := p.setDetail(ps, true, "--detail=always"); err != nil {
			return err
		}
	}
	p.trackLocal(g)
	p.mu.Lock()
	p.procs[pid] = ps
	p.added = append(p.added, pid)
	p.mu.Unlock()
	if !p.node {
		// Activity sampling is on for this process from now: no activity
		// in a window means no network I/O.
		p.watchAdded()
	}
	return nil
}

// watchAdded tells the correlator which processes are sampled from now.
// Called from the goroutine that drives the correlator.
func (p *Pipeline) watchAdded() {
	p.mu.Lock()
	added := p.added
	p.added = nil
	p.mu.Unlock()
	now := monoNow()
	for _, pid := range added {
		p.corr.WatchActivity(pid, now)
	}
}

func (p *Pipeline) proc(pid uint32) *procState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.procs[pid]
}

// Probes is the Go side, for its binary and counters.
func (p *Pipeline) Probes() *goprobe.Process { return p.goP }

// TCP is the kernel side, for its counters.
func (p *Pipeline) TCP() *tcp.Collector { return p.tcp }

// Node is the Go side's programs, for its counters.
func (p *Pipeline) Node() *goprobe.Node { return p.goN }

func (p *Pipeline) setDetail(ps *procState, on bool, reason string) error {
	pid := uint32(ps.probes.PID())
	if on && ps.goidOff >= 0 {
		// Before the creation probes: every context they see has its
		// goroutine's I/O sampled.
		if err := p.tcp.RegisterGoProcess(pid, uint32(ps.goidOff)); err != nil {
			return err
		}
	}
	if err := ps.probes.SetDetail(on); err != nil {
		return fmt.Errorf("switch detail probes: %w", err)
	}
	if !on {
		if err := p.tcp.UnregisterGoProcess(pid); err != nil {
			return err
		}
	}
	p.log.Info("detail probes switched", "pid", pid, "on", on, "reason", reason)
	p.localDetail(pid, on)
	if p.sink.Detail != nil {
		return p.sink.Detail(time.Now(), pid, on, reason)
	}
	return nil
}

// switchDetail is the adaptive switch: a failure (typically the process
// exiting while the probes attach) leaves the cold tier tracing and is
// said, never fatal: the reports already seen must not be lost.
func (p *Pipeline) switchDetail(ps *procState, on bool, reason string) {
	if err := p.setDetail(ps, on, reason); err != nil {
		pid := uint32(ps.probes.PID())
		p.log.Warn("detail probes not switched; the cold tier keeps tracing", "pid", pid, "on", on, "err", err)
		if p.sink.Detail != nil {
			p.sink.Detail(time.Now(), pid, false, "could not switch: "+err.Error())
		}
	}
}

// Run merges and correlates until ctx ends or the process exits (exited
// closes), then drains what is buffered and flushes the correlator.
func (p *Pipeline) Run(ctx context.Context, exited <-chan struct{}) error {
	// The tick releases buffered events and reports: every 50 ms while
	// something is buffered or waiting, every 250 ms when idle (an idle
	// agent's every wakeup is CPU the node pays for nothing).
	const tickBusy, tickIdle = 50 * time.Millisecond, 250 * time.Millisecond
	tk := tick.NewTicker(tickBusy) // on the instants of the collectors' timers
	defer tk.Stop()
	busy := true
	wake := func() {
		if !busy {
			busy = true
			tk.Reset(tickBusy)
		}
	}
	tcpEvents, goEvents, bindings := p.tcp.Events(), p.goN.Events(), p.goN.Bindings()
	localEvents := p.local.events()
	var calls <-chan event.Call
	if p.cfg.Audit {
		calls = p.goN.Calls()
	}
	for {
		select {
		case ev, ok := <-tcpEvents:
			if !ok {
				return errors.New("kernel event stream ended unexpectedly")
			}
			p.buf = append(p.buf, &ev)
			wake()
		case c, ok := <-calls:
			if !ok {
				calls = nil
				continue
			}
			if p.sink.Call != nil {
				if err := p.sink.Call(&c); err != nil {
					return err
				}
			}
			p.trackCall(&c)
			if !c.End && !c.HasDeadline && p.sink.Missing != nil {
				// Said in stream order, so the connection's peer (from
				// the kernel events before the call) is known.
				p.missing = append(p.missing, c)
				wake()
			}
		case d, ok := <-goEvents:
			if !ok {
				return errors.New("deadline event stream ended unexpectedly")
			}
			p.buf = append(p.buf, &d)
			wake()
			ps := p.proc(d.PID)
			if ps != nil {
				p.countExpiry(ps, d.Mono)
			}
			if ps != nil && p.cfg.Detail == "auto" && !p.stormTripped() && !p.exeTripped(ps) && ps.ctl.Observe(time.Now()) {
				p.switchDetail(ps, true, fmt.Sprintf("%d expiries within %v", p.cfg.Policy.Threshold, p.cfg.Policy.Window))
			}
		case b, ok := <-bindings:
			if !ok {
				bindings = nil // closed with the probes: stop selecting it
				continue
			}
			p.buf = append(p.buf, &b)
			wake()
		case l, ok := <-localEvents:
			if !ok {
				localEvents = nil
				continue
			}
			p.buf = append(p.buf, &l)
			wake()
		case <-tk.C:
			p.watchAdded()
			if p.cfg.Detail == "auto" {
				now := time.Now()
				p.mu.Lock()
				var quiet []*procState
				for _, ps := range p.procs {
					if ps.ctl.Tick(now) {
						quiet = append(quiet, ps)
					}
				}
				p.mu.Unlock()
				for _, ps := range quiet {
					p.switchDetail(ps, false, fmt.Sprintf("no expiry for %v", p.cfg.Policy.Quiet))
				}
			}
			if err := p.release(monoNow() - uint64(reorder)); err != nil {
				return err
			}
			if err := p.reportHung(time.Now()); err != nil {
				return err
			}
			if err := p.nodeGuardTick(time.Now()); err != nil {
				return err
			}
			if err := p.guardTick(time.Now()); err != nil {
				return err
			}
			busy = len(p.buf) > 0 || p.corr.Waiting() > 0 || len(p.missing) > 0
			if busy {
				tk.Reset(tickBusy)
			} else {
				tk.Reset(tickIdle)
			}
		case <-exited:
			return p.finish(tcpEvents, goEvents, bindings)
		case <-ctx.Done():
			return p.finish(tcpEvents, goEvents, bindings)
		}
	}
}

// finish takes what the ring buffers still hold (one poll interval), then
// releases everything and flushes the correlator's pending deadlines.
func (p *Pipeline) finish(tcpEvents <-chan event.TCP, goEvents <-chan event.Deadline, bindings <-chan event.Binding) error {
	end := time.After(2 * reorder)
	localEvents := p.local.events()
	for {
		select {
		case l, ok := <-localEvents:
			if ok {
				p.buf = append(p.buf, &l)
			}
		case ev, ok := <-tcpEvents:
			if ok {
				p.buf = append(p.buf, &ev)
			}
		case d, ok := <-goEvents:
			if ok {
				p.buf = append(p.buf, &d)
			}
		case b, ok := <-bindings:
			if ok {
				p.buf = append(p.buf, &b)
			}
		case <-end:
			if err := p.release(^uint64(0)); err != nil {
				return err
			}
			return p.emit(p.corr.Flush())
		}
	}
}

// release hands the buffered events up to mono to the sinks in time order.
func (p *Pipeline) release(upTo uint64) error {
	slices.SortStableFunc(p.buf, func(a, b event.Any) int {
		ma, mb := a.MonoTime(), b.MonoTime()
		switch {
		case ma < mb:
			return -1
		case ma > mb:
			return 1
		}
		return 0
	})
	n := 0
	for ; n < len(p.buf) && p.buf[n].MonoTime() <= upTo; n++ {
		ev := p.buf[n]
		if t, ok := ev.(*event.TCP); ok {
			p.notePeer(t)
			if p.sink.TCP != nil {
				if err := p.sink.TCP(t); err != nil {
					return err
				}
			}
			// The node's kernel collector sees every process: only the
			// traced ones (and sockets of no known owner) concern reports.
			if p.node && t.PID != 0 && !p.Traced(t.PID) {
				continue
			}
		}
		if p.sink.Event != nil {
			if err := p.sink.Event(ev); err != nil {
				return err
			}
		}
		if p.sink.Report != nil {
			if err := p.emit(p.corr.Push(ev)); err != nil {
				return err
			}
		}
	}
	p.buf = append(p.buf[:0], p.buf[n:]...)
	if err := p.releaseMissing(upTo); err != nil {
		return err
	}
	if p.sink.Report != nil && upTo != ^uint64(0) {
		return p.emit(p.corr.Advance(upTo))
	}
	return nil
}

func (p *Pipeline) emit(rs []correlate.Report) error {
	for i := range rs {
		if err := p.sink.Report(&rs[i]); err != nil {
			return err
		}
	}
	return nil
}

// Close detaches both collectors and the local-cause sources.
func (p *Pipeline) Close() error {
	errs := []error{p.local.close()}
	if p.tcp != nil {
		errs = append(errs, p.tcp.Close())
	}
	if p.goP != nil {
		errs = append(errs, p.goP.Close())
	} else if p.goN != nil {
		errs = append(errs, p.goN.Close())
	}
	return errors.Join(errs...)
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
