// Package pipeline joins the kernel TCP collector and the Go deadline
// probes of one process into a single time-ordered event stream, and feeds
// it to the correlator (and, when recording, to a file). It owns the
// adaptive detail tier. cmd/tracer's trace and record commands use it.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/timeout-tracer/tracer/collector"
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
	Storm storm.Policy
	// KernelAll (StartNode) hands the sink's Kernel every kernel TCP event
	// of the node, traced processes or not (node-wide TCP metrics);
	// otherwise only the traced processes' (and sockets of no known owner).
	KernelAll bool
	Logger    *slog.Logger
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
	// merge orders the sources' events on their watermarks; stream is
	// everything after it (correlator, audit), the same pure code `tracer
	// replay` runs. Run's goroutine only.
	merge  *correlate.Merge
	stream *correlate.Stream
	// progress says, per source (the src* constants), the monotonic time
	// before which it has handed over every event.
	progress [nSources]func() uint64
	// kick, per source, asks it to say its progress now rather than at its
	// next poll; nil when it cannot.
	kick [nSources]func()
	// heldExpiries is the number of expiries the merge holds (Run's
	// goroutine).
	heldExpiries int
	// in are the sources' channels; nil: the collectors' (tests set their
	// own).
	in *inputs

	mu    sync.Mutex
	procs map[uint32]*procState
	// expected are processes the node agent saw exec while the kernel
	// collector ran and has yet to judge (Expect): their kernel events
	// are kept meanwhile, and the connections they hold when attached are
	// not older than the tracer.
	expected map[uint32]bool
	rejected map[uint32]bool       // judged not to be traced (Unexpect)
	ended    map[uint32]uint64     // when a traced process was removed: its events up to then are kept
	unjudged func(pid uint32) bool // SetUnjudged
	added    []uint32              // processes added since Run last looked: watch their activity
	sink     Sink
	// switches are the probe switches the control side made, for Run's
	// goroutine to hand to the sink (the sink is called from Run only);
	// switched signals that there are some.
	swMu     sync.Mutex
	switches []Switch
	switched chan struct{}
	// expiries carries each expiry's process from the data loop to the
	// control loop (the adaptive switch and the storm guards count them);
	// controlMissed counts those the control loop was too busy to take.
	expiries      chan expirySeen
	controlMissed atomic.Uint64
	// local are the local-cause sources.
	local local
	// cgroups tells the cgroup id of each process attached.
	cgroups *workload.CgroupIDs
	// guard is the storm guard (Start only; nil when off); guardAt when it
	// last looked; stormSnap its counters for other goroutines.
	guard     *storm.Guard
	guardAt   time.Time
	auditShed bool // the guard took the call probes off (control loop only)
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
	// heldAtAttach is how many TCP connections the process held when it
	// was attached, at attachedAt (for the correlator: HeldAtAttach).
	heldAtAttach int
	// inboundAtAttach: the cookies of the connections it had accepted before the attach.
	inboundAtAttach []uint64
	// troubleAtAttach: its connections that were in trouble at the attach
	// (RTO backoff, SYN retries, zero window), as state records.
	troubleAtAttach []event.TCP
	attachedAt      uint64
	// goidOff is runtime.g.goid's offset in the binary (-1: unknown). The
	// kernel's send/receive hooks read the goroutine doing the I/O only
	// while the detail tier is on: a goroutine binding is used only for a
	// context whose creating goroutine the detail probes saw, and reading
	// it is ~half of those hooks' cost on every request.
	goidOff int64
}

// The sources the pipeline merges, in the order of Pipeline.progress.
const (
	srcTCP = iota
	srcDeadlines
	srcBindings
	srcLocal // the throttling samplers (user space: their events are sent as they are made)
	srcSched // run-queue and GC events (a ring buffer)
	srcCalls
	nSources
)

// localSlack is how far behind now the samplers' progress is taken: their
// events reach the merge through a forwarding goroutine.
const localSlack = 20 * time.Millisecond

// finishWait bounds how long the end of a run waits for every source to
// pass the moment it ended (they are kicked: each answers within a few
// milliseconds unless starved of CPU).
const finishWait = 500 * time.Millisecond

// Start attaches everything for process cfg.PID. On error nothing is left
// attached.
func Start(cfg Config, sink Sink) (_ *Pipeline, err error) {
	p := newPipeline(cfg, sink)
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	// The kernel side is attached, and the sockets the process holds are
	// read, once its executable is known to be traceable and before its
	// expiries are seen: a request that expires after that moment had its
	// connection open when its state was read (loading the kernel side
	// took over a second on a loaded machine, and a connection in RTO
	// backoff closed by its expiry in between was never known).
	var adopted adoption
	before := func() error {
		var err error
		if p.tcp, err = tcp.Start(tcp.Config{PID: uint32(cfg.PID), Lifecycle: true,
			ActivityInterval: p.cfg.Activity, Logger: p.log}); err != nil {
			return fmt.Errorf("start the kernel TCP collector: %w", err)
		}
		adopted = p.adopt(uint32(cfg.PID))
		return nil
	}
	if p.goP, err = goprobe.Start(goprobe.Config{PID: cfg.PID, Logger: p.log, BeforeAttach: before}); err != nil {
		return nil, err
	}
	p.goN = p.goP.Node()
	if err := p.corrStart(); err != nil {
		return nil, err
	}
	if err := p.startLocal(); err != nil {
		return nil, err
	}
	p.wireSources()
	if err := p.track(p.goP, adopted); err != nil {
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
	p.wireSources()
	return p, nil
}

func newPipeline(cfg Config, sink Sink) *Pipeline {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Activity == 0 {
		cfg.Activity = time.Second
	}
	if sink == nil {
		sink = Nop{}
	}
	return &Pipeline{cfg: cfg, log: cfg.Logger, sink: sink, procs: make(map[uint32]*procState), cgroups: workload.NewCgroupIDs(cfg.Local.CgroupRoot),
		switched: make(chan struct{}, 1), expiries: make(chan expirySeen, controlQueue)}
}

func (p *Pipeline) corrStart() (err error) {
	cfg := correlate.StreamConfig{Correlator: correlate.DefaultConfig()}
	cfg.Correlator.ActivityResolution = p.cfg.Activity
	if p.cfg.Audit {
		cfg.Audit = &correlate.AuditConfig{Missing: true, Hung: true, HangAfter: p.cfg.HangAfter}
	}
	if p.node {
		// The node's kernel collector sees every process: only the traced
		// ones (and sockets of no known owner) concern reports.
		cfg.Keep = p.keep
		cfg.KernelAll = p.cfg.KernelAll
	}
	p.stream, err = correlate.NewStream(cfg, p.sink)
	p.merge = correlate.NewMerge(nSources)
	return err
}

// wireSources takes each source's progress (and its kick) from the
// collector that feeds it.
func (p *Pipeline) wireSources() {
	p.progress[srcTCP], p.kick[srcTCP] = p.tcp.Progress, p.tcp.Kick
	p.progress[srcDeadlines], p.kick[srcDeadlines] = p.goN.Progress, p.goN.Kick
	p.progress[srcBindings], p.kick[srcBindings] = p.goN.BindingsProgress, p.goN.Kick
	p.progress[srcCalls], p.kick[srcCalls] = p.goN.BindingsProgress, p.goN.Kick
	p.progress[srcLocal] = func() uint64 { return tick.Mono() - uint64(localSlack) }
	if s := p.local.sched; s != nil {
		p.progress[srcSched], p.kick[srcSched] = s.Progress, s.Kick
	} else {
		p.progress[srcSched] = func() uint64 { return ^uint64(0) } // no such source
	}
}

// AddProcess starts tracing process pid (StartNode). Errors wrapping
// goprobe.ErrNotTraceable mean it cannot be traced; nothing is left
// attached for it then.
func (p *Pipeline) AddProcess(pid int) (*goprobe.Process, error) {
	var adopted adoption
	g, err := p.goN.AddBefore(pid, func() error { adopted = p.adopt(uint32(pid)); return nil })
	if err != nil {
		return nil, err
	}
	if err := p.track(g, adopted); err != nil {
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
	if ok {
		p.endedLocked(uint32(pid), tick.Mono())
	}
	p.mu.Unlock()
	if !ok {
		return nil
	}
	return errors.Join(p.goN.Remove(pid), p.tcp.UnregisterGoProcess(uint32(pid)), p.untrackLocal(uint32(pid)))
}

// maxExpected bounds the processes expected at once (an exec storm), and
// maxRejected the cache of processes judged not to be traced: past them,
// a new one is not expected, and the cache starts afresh.
const (
	maxExpected = 4096
	maxRejected = 16384
)

// Expect says that process pid has just exec'd, seen while the kernel
// collector ran, and is to be judged (StartNode): from now its kernel TCP
// events are kept, not dropped as an untraced process's, so that what the
// connections it opens before its probes are attached did is known. A
// one-shot CLI connects within milliseconds of its exec, long before the
// analysis of its executable ends: its connects in SYN retries were
// dropped, and its expiries read "held a connection older than the
// tracer" (unknown) or "did no TCP I/O" (a false local). Unexpect, Forget
// or AddProcess ends it.
func (p *Pipeline) Expect(pid int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.expectLocked(uint32(pid))
}

// judgedMapsLocked makes the expected and rejected sets on first use.
func (p *Pipeline) judgedMapsLocked() {
	if p.expected == nil {
		p.expected, p.rejected = map[uint32]bool{}, map[uint32]bool{}
	}
}

func (p *Pipeline) expectLocked(pid uint32) bool {
	p.judgedMapsLocked()
	delete(p.rejected, pid)
	if len(p.expected) >= maxExpected {
		return false
	}
	p.expected[pid] = true
	return true
}

// Unexpect: pid was judged not to be traced. Its events are dropped from
// now, without asking Unjudged again.
func (p *Pipeline) Unexpect(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.judgedMapsLocked()
	delete(p.expected, uint32(pid))
	if len(p.rejected) >= maxRejected {
		clear(p.rejected)
	}
	p.rejected[uint32(pid)] = true
}

// Forget: pid is gone, or runs a new program (its number may come back
// as another process).
func (p *Pipeline) Forget(pid int) {
	p.mu.Lock()
	delete(p.expected, uint32(pid))
	delete(p.rejected, uint32(pid))
	p.mu.Unlock()
}

// SetUnjudged sets what the node stream asks about a process it has an
// event of and knows nothing about (neither traced, expected nor judged):
// true expects it. The exec event that would have expected it may come
// after its first connection's events (the proc and TCP ring buffers are
// read apart): the agent answers from the process's age. Called once per
// such process (the answer is kept), never with the pipeline's lock held.
func (p *Pipeline) SetUnjudged(f func(pid uint32) bool) {
	p.mu.Lock()
	p.unjudged = f
	p.mu.Unlock()
}

// endedLinger is how long a removed process's events are still kept:
// far longer than the stream runs behind.
const endedLinger = time.Minute

func (p *Pipeline) endedLocked(pid uint32, now uint64) {
	if p.ended == nil {
		p.ended = map[uint32]uint64{}
	}
	if len(p.ended) >= maxExpected {
		for k, t := range p.ended {
			if t+uint64(endedLinger) < now {
				delete(p.ended, k)
			}
		}
		if len(p.ended) >= maxExpected {
			clear(p.ended)
		}
	}
	p.ended[pid] = now
}

// keep is the node stream's filter: the events of traced or expected
// processes, and of removed ones up to their removal (the stream runs
// behind the kernel: a one-shot program's SYN retry came through after
// its exit had detached it).
func (p *Pipeline) keep(pid uint32, mono uint64) bool {
	p.mu.Lock()
	_, traced := p.procs[pid]
	end, ended := p.ended[pid]
	keep := traced || p.expected[pid] || ended && mono <= end
	known := keep || p.rejected[pid]
	ask := p.unjudged
	p.mu.Unlock()
	if known || ask == nil {
		return keep
	}
	if ask(pid) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.expectLocked(pid)
	}
	p.Unexpect(int(pid))
	return false
}

// adoption is what was read of a process's sockets just before its
// expiries were seen (Pipeline.adopt), at mono.
type adoption struct {
	tcp.Adoption
	err  error
	mono uint64
}

// adopt records the process's sockets older than the tracer with the
// kernel side, and reads the state of its connections: connections its
// listeners accept are attributed to the process from their handshake
// (the kernel side records listeners at listen(); these predate the
// collector), and its connections older than the collector from now on
// (their retransmits had no owner: "no TCP I/O", local).
func (p *Pipeline) adopt(pid uint32) adoption {
	a, err := p.tcp.Adopt(pid, p.cgroups.Of(int(pid)))
	return adoption{a, err, tick.Mono()}
}

// track registers a process whose Go probes are attached, with what was
// read of its sockets before (adopt): goroutine naming in the kernel,
// audit and detail as configured.
func (p *Pipeline) track(g *goprobe.Process, adopted adoption) error {
	pid := uint32(g.PID())
	ps := &procState{probes: g, ctl: adaptive.New(p.cfg.Policy), goidOff: -1}
	if off, err := g.Binary().FieldOffset("runtime.g", "goid"); err == nil {
		ps.goidOff = int64(off)
	}
	nl, nc := adopted.Listeners, adopted.Conns
	ps.inboundAtAttach, ps.troubleAtAttach = adopted.Inbound, adopted.Trouble
	if err := adopted.err; err != nil {
		p.log.Warn("sockets older than the tracer not adopted: their events are attributed at their next send", "pid", pid, "err", err)
		nc = 1 // unknown: as if it held one
	} else if nl > 0 || nc > 0 {
		p.log.Debug("sockets adopted", "pid", pid, "listeners", nl, "connections", nc, "in_trouble", len(adopted.Trouble))
	}
	p.mu.Lock()
	expected := p.expected[pid]
	p.mu.Unlock()
	if expected {
		// Its events were kept since its exec: what it holds is not
		// older than the tracer.
		nc, ps.troubleAtAttach = 0, nil
	}
	ps.heldAtAttach, ps.attachedAt = nc, adopted.mono
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
	// Everything attached: what the analysis of the executable loaded
	// (its tables, DWARF) is dropped, in the node agent after a while
	// (the next process of a one-shot program's file); symbolizing reads
	// the file.
	g.ReleaseAnalysis()
	p.mu.Lock()
	p.procs[pid] = ps
	delete(p.expected, pid)
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
	now := tick.Mono()
	for _, pid := range added {
		p.stream.Correlator().WatchActivity(pid, now)
		if ps := p.proc(pid); ps != nil {
			p.stream.Correlator().HeldAtAttach(pid, ps.heldAtAttach, ps.attachedAt)
			p.stream.Correlator().InboundAtAttach(ps.inboundAtAttach, ps.attachedAt)
			for i := range ps.troubleAtAttach {
				if err := p.stream.StateAtAttach(&ps.troubleAtAttach[i]); err != nil {
					p.log.Warn("a connection's state at attach not recorded", "pid", pid, "err", err)
				}
			}
			ps.troubleAtAttach = nil
		}
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
	p.emit(Switch{Time: time.Now(), PID: pid, On: on, Reason: reason})
	return nil
}

// emit queues a switch for Run's goroutine to hand to the sink.
func (p *Pipeline) emit(s Switch) {
	p.swMu.Lock()
	p.switches = append(p.switches, s)
	p.swMu.Unlock()
	select {
	case p.switched <- struct{}{}:
	default:
	}
}

// deliverSwitches hands the queued switches to the sink (Run's goroutine).
func (p *Pipeline) deliverSwitches() error {
	p.swMu.Lock()
	sw := p.switches
	p.switches = nil
	p.swMu.Unlock()
	var errs []error
	for _, s := range sw {
		if err := p.sink.Switch(s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// switchDetail is the adaptive switch: a failure (typically the process
// exiting while the probes attach) leaves the cold tier tracing and is
// said, never fatal: the reports already seen must not be lost.
func (p *Pipeline) switchDetail(ps *procState, on bool, reason string) {
	if err := p.setDetail(ps, on, reason); err != nil {
		pid := uint32(ps.probes.PID())
		p.log.Warn("detail probes not switched; the cold tier keeps tracing", "pid", pid, "on", on, "err", err)
		p.emit(Switch{Time: time.Now(), PID: pid, On: false, Reason: "could not switch: " + err.Error()})
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
	in := p.in
	if in == nil {
		in = p.inputs()
	}
	// The control loop (adaptive detail, storm guards) runs beside this
	// one: attaching or detaching probes takes milliseconds to seconds,
	// and the events and reports must not wait for it. It stops before the
	// end's drain, and its last switches reach the sink there.
	stopControl := make(chan struct{})
	controlDone := make(chan struct{})
	go func() {
		defer close(controlDone)
		p.control(stopControl)
	}()
	defer func() {
		select {
		case <-stopControl:
		default:
			close(stopControl)
			<-controlDone
		}
	}()
	end := func() error {
		close(stopControl)
		<-controlDone
		return errors.Join(p.finish(in), p.deliverSwitches())
	}
	// due fires when the next report's grace window ends: the sources are
	// asked for their progress then, and the report leaves a moment later
	// instead of at the next tick after the sources' next polls.
	due := time.NewTimer(time.Hour)
	due.Stop()
	defer due.Stop()
	dueAt := uint64(0)
	// armDue arms the timer for the next report, a ring's slack after its
	// due time (a drain at t says only that it is past t less the slack).
	// A report still held after its time means a source has not answered
	// a kick: it is kicked again at each tick until it does.
	armDue := func() (late bool) {
		t, ok := p.stream.NextDue()
		if !ok {
			return false
		}
		at := t + uint64(collector.Slack+2*time.Millisecond)
		now := tick.Mono()
		if at != dueAt {
			dueAt = at
			wait := time.Duration(0)
			if at > now {
				wait = time.Duration(at - now)
			}
			due.Reset(wait)
			return false
		}
		return now >= at
	}
	for {
		select {
		case ev, ok := <-in.tcp:
			if !ok {
				return errors.New("kernel event stream ended unexpectedly")
			}
			p.merge.Add(&ev)
			wake()
		case c, ok := <-in.calls:
			if !ok {
				in.calls = nil
				continue
			}
			p.merge.Add(&c)
			wake()
		case d, ok := <-in.deadlines:
			if !ok {
				return errors.New("deadline event stream ended unexpectedly")
			}
			p.addExpiry(&d)
			wake()
		case b, ok := <-in.bindings:
			if !ok {
				in.bindings = nil // closed with the probes: stop selecting it
				continue
			}
			p.merge.Add(&b)
			wake()
		case l, ok := <-in.local:
			if !ok {
				in.local = nil
				continue
			}
			p.merge.Add(&l)
			wake()
		case l, ok := <-in.sched:
			if !ok {
				in.sched = nil
				continue
			}
			p.merge.Add(&l)
			wake()
		case <-due.C:
			// Once per due time: if a source still lags, the ticks
			// release the report.
			p.kickAll()
			// The kicked readers drain within a few milliseconds.
			tk.Reset(5 * time.Millisecond)
			busy = true
			continue
		case <-p.switched:
			if err := p.deliverSwitches(); err != nil {
				return err
			}
		case <-tk.C:
			p.watchAdded()
			if err := p.release(in); err != nil {
				return err
			}
			late := armDue()
			if late {
				p.kickAll()
			} else if p.heldExpiries > 0 && p.kickLagging() {
				// An expiry waits for a quiet source's next poll: ask it
				// now (an expiry the merge holds is not yet a due report).
				late = true
			}
			busy = p.merge.Buffered() > 0 || p.stream.Waiting()
			switch {
			case late:
				tk.Reset(5 * time.Millisecond) // the kicked readers drain within a few milliseconds
			case busy:
				tk.Reset(tickBusy)
			default:
				tk.Reset(tickIdle)
			}
		case <-exited:
			return end()
		case <-ctx.Done():
			return end()
		}
	}
}

// inputs are the channels Run merges; nil ones are not selected.
type inputs struct {
	tcp       <-chan event.TCP
	deadlines <-chan event.Deadline
	bindings  <-chan event.Binding
	local     <-chan event.Local
	sched     <-chan event.Local
	calls     <-chan event.Call
}

func (p *Pipeline) inputs() *inputs {
	in := &inputs{tcp: p.tcp.Events(), deadlines: p.goN.Events(), bindings: p.goN.Bindings(), local: p.local.events()}
	if p.local.sched != nil {
		in.sched = p.local.sched.Events()
	}
	if p.cfg.Audit {
		in.calls = p.goN.Calls()
	}
	return in
}

// drain takes what the channels hold now, without waiting and no more:
// a source that keeps its channel full (a storm) must not keep the tick
// from releasing. The events a source handed over before its progress was
// read are in its channel by then (or already taken).
func (p *Pipeline) drain(in *inputs) {
	add := func(ev event.Any) { p.merge.Add(ev) }
	drainHeld(in.tcp, func(ev *event.TCP) { add(ev) })
	drainHeld(in.deadlines, p.addExpiry)
	drainHeld(in.bindings, func(b *event.Binding) { add(b) })
	drainHeld(in.local, func(l *event.Local) { add(l) })
	drainHeld(in.sched, func(l *event.Local) { add(l) })
	drainHeld(in.calls, func(c *event.Call) { add(c) })
}

// drainHeld hands over the values ch holds now (none of a nil channel).
func drainHeld[T any](ch <-chan T, add func(*T)) {
	for n := len(ch); n > 0; n-- {
		v, ok := <-ch
		if !ok {
			return
		}
		add(&v)
	}
}

// addExpiry hands an expiry to the merge (heldExpiries counts those it
// holds, for which lagging sources are kicked) and counts it for the storm
// guard and the adaptive detail switch.
func (p *Pipeline) addExpiry(d *event.Deadline) {
	p.heldExpiries++
	p.merge.Add(d)
	select {
	case p.expiries <- expirySeen{d.PID, d.Mono}:
	default:
		p.controlMissed.Add(1)
	}
}

// controlQueue is how many expiries may wait for the control loop; past
// it they are not counted by the adaptive switch and the node's storm
// guards (ControlMissed): a storm that fills it has tripped them already.
const controlQueue = 4096

// ControlMissed is the number of expiries the control loop did not count
// (its queue was full).
func (p *Pipeline) ControlMissed() uint64 { return p.controlMissed.Load() }

// control is the control loop: it counts expiries for the adaptive detail
// switch and the node's storm guards, switches the detail tier of quiet
// processes off, and runs the storm guards, until stop closes. The
// switches it makes are queued for Run's goroutine (emit).
func (p *Pipeline) control(stop <-chan struct{}) {
	tk := time.NewTicker(controlTick)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case x := <-p.expiries:
			p.observeExpiry(x)
		case <-tk.C:
			now := time.Now()
			p.quietTick(now)
			p.nodeGuardTick(now)
			p.guardTick(now)
		}
	}
}

// controlTick is how often the control loop looks at quiet processes and
// the storm guards: as often as the guards act.
const controlTick = storm.Interval

// expirySeen is an expiry as the control loop counts it.
type expirySeen struct {
	pid  uint32
	mono uint64
}

// push hands one released event to the stream.
func (p *Pipeline) push(ev event.Any) error {
	if _, ok := ev.(*event.Deadline); ok {
		p.heldExpiries--
	}
	return p.stream.Push(ev)
}

// kickLag is how far behind now a source's progress may be, while the
// merge holds events, before it is asked for it (a quiet Go ring polls
// only once a second).
const kickLag = 30 * time.Millisecond

// kickLagging asks the sources that lag to say their progress now, and
// reports whether it asked any.
func (p *Pipeline) kickLagging() bool {
	now, kicked := tick.Mono(), false
	for i, k := range p.kick {
		if k != nil && p.progress[i]()+uint64(kickLag) < now {
			k()
			kicked = true
		}
	}
	return kicked
}

// kickAll asks every source that can to say its progress now.
func (p *Pipeline) kickAll() {
	for _, k := range p.kick {
		if k != nil {
			k()
		}
	}
}

// observeExpiry counts an expiry for the storm guard and the adaptive
// detail switch.
func (p *Pipeline) observeExpiry(x expirySeen) {
	ps := p.proc(x.pid)
	if ps == nil {
		return
	}
	p.countExpiry(ps, x.mono)
	if p.cfg.Detail == "auto" && !p.stormTripped() && !p.exeTripped(ps) && ps.ctl.Observe(time.Now()) {
		p.switchDetail(ps, true, fmt.Sprintf("%d expiries within %v", p.cfg.Policy.Threshold, p.cfg.Policy.Window))
	}
}

// quietTick switches off the detail tier of processes that have been
// quiet long enough.
func (p *Pipeline) quietTick(now time.Time) {
	if p.cfg.Detail != "auto" {
		return
	}
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

// release hands the events before the sources' watermark to the stream in
// time order, then tells it that time has come that far. Each source's
// progress is read before its channel is drained: everything it handed
// over before that progress is then in the merge.
func (p *Pipeline) release(in *inputs) error {
	for i, prog := range p.progress {
		p.merge.Progress(i, prog())
	}
	p.drain(in)
	w, err := p.merge.Release(p.push)
	if err != nil {
		return err
	}
	return p.stream.Advance(w)
}

// finish takes what the ring buffers still hold (until every source has
// passed the moment Run ended, at most finishWait), then releases
// everything, marks the end of the stream and flushes the correlator.
func (p *Pipeline) finish(in *inputs) error {
	end := tick.Mono()
	p.kickAll()
	deadline := time.After(finishWait)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
wait:
	for {
		select {
		case <-deadline:
			break wait
		case <-poll.C:
			done := true
			for _, prog := range p.progress {
				done = done && prog() >= end
			}
			p.drain(in)
			if done {
				break wait
			}
			p.kickAll() // a drain says only that it is past its start less the slack
		}
	}
	p.drain(in)
	if err := p.merge.Drain(p.push); err != nil {
		return err
	}
	if err := p.stream.Push(&event.Mark{Mono: max(end, p.stream.Now())}); err != nil {
		return err
	}
	return p.stream.Flush()
}

// Stats are the join's counters. Run's goroutine, or after Run returned.
func (p *Pipeline) Stats() correlate.Stats { return p.stream.Correlator().Stats() }

// Late is the number of events that reached the merge behind its
// watermark (a source said more progress than it had made): released at
// once, out of order, never dropped. Run's goroutine, or after Run.
func (p *Pipeline) Late() uint64 { return p.merge.Late() }

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
