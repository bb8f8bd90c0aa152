package sched

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/gobin"
	"github.com/timeout-tracer/tracer/tick"
)

// Config configures the local-cause collector.
type Config struct {
	// Interval is how often the run-queue sums are read and turned into
	// intervals. Default 100ms.
	Interval time.Duration
	// Heartbeat: an interval with nothing lost is still emitted this often
	// per process while the run-queue hooks are attached, so the correlator
	// can tell "nothing lost" from "not watching". Default 1s.
	Heartbeat time.Duration
	// ForceRawTP uses raw_tp programs even where tp_btf works (tests).
	ForceRawTP bool
	Logger     *slog.Logger
}

// Stats counts what the local-cause collector did.
type Stats struct {
	Hits          uint64 // scheduler tracepoint program runs (all tasks on the node, while attached)
	Matched       uint64 // of those, runs for a traced process
	ThreadsFull   uint64 // thread wakeups not tracked: the thread table was full
	GCHits        uint64 // GC uprobe runs
	GCLost        uint64 // pauses dropped: the ring buffer was full
	Dropped       uint64 // intervals the consumer was too slow to take
	DecodeErrors  uint64
	RunqueueOn    bool   // the scheduler hooks are attached
	RunqueueHooks string // "tp_btf" or "raw_tp" while attached
}

// Collector collects two local causes of timeouts for traced processes:
// run-queue delay from the scheduler tracepoints (sched_wakeup,
// sched_wakeup_new, sched_switch; filtered in the kernel to traced tgids,
// attached and detached with SetRunqueue because they run on every context
// switch of the node), and Go stop-the-world pauses from uprobes that fire
// once per pause (TraceGC). Both come out of Events as event.Local. Close it
// once.
type Collector struct {
	// pollAt is when the run-queue poll under way started, 0 when none is.
	pollAt atomic.Uint64

	cfg    Config
	log    *slog.Logger
	maps   schedMaps
	spec   *ebpf.CollectionSpec
	specs  schedProgramSpecs
	progs  map[*ebpf.ProgramSpec]*ebpf.Program // loaded on first use
	reader *collector.Ring
	events chan event.Local
	done   chan struct{}
	wg     sync.WaitGroup

	multi bool // uprobes as uprobe_multi links

	mu       sync.Mutex
	rqLinks  []link.Link
	rqHooks  string
	pids     map[uint32]*rqPID
	gc       map[uint32][]link.Link
	epoch    uint64
	dropped  uint64
	decodeEr uint64
	closed   bool
}

// rqPID is the reader's state for one traced process.
type rqPID struct {
	last     schedTtRqSum
	lastMono uint64
	lastSent uint64 // when an interval was last emitted (heartbeat)
	fresh    bool   // the next read is a baseline
}

// Start loads the programs and maps; nothing is attached until
// SetRunqueue(true) or TraceGC.
func Start(cfg Config) (_ *Collector, err error) {
	if cfg.Interval <= 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = time.Second
	}
	cfg.Logger = collector.Logger(cfg.Logger)
	if err := collector.Setup(cfg.Logger); err != nil {
		return nil, err
	}
	s := &Collector{cfg: cfg, log: cfg.Logger, progs: map[*ebpf.ProgramSpec]*ebpf.Program{},
		events: make(chan event.Local, 1024), done: make(chan struct{}),
		pids: map[uint32]*rqPID{}, gc: map[uint32][]link.Link{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.spec, err = loadSched(); err != nil {
		return nil, fmt.Errorf("load sched BPF spec: %w", err)
	}
	if err := s.spec.Assign(&s.specs); err != nil {
		return nil, fmt.Errorf("load sched BPF spec: %w", err)
	}
	// GC probes as uprobe_multi links where the kernel has them: perf
	// uprobes need CAP_SYS_ADMIN on current kernels (see
	// collector.UprobeMulti).
	if s.multi = collector.UprobeMulti(); s.multi {
		collector.AsUprobeMulti(s.spec)
	}
	// The maps alone: programs are loaded against them when first attached.
	if err := s.spec.LoadAndAssign(&s.maps, nil); err != nil {
		return nil, fmt.Errorf("create maps: %w", collector.Explain(err))
	}
	if s.reader, err = collector.NewRing(s.maps.GcEvents); err != nil {
		return nil, fmt.Errorf("open GC ring buffer: %w", err)
	}
	s.wg.Add(2)
	go s.readGC()
	go s.poll()
	return s, nil
}

// program loads program ps (once) against the collector's maps.
func (s *Collector) program(ps *ebpf.ProgramSpec) (*ebpf.Program, error) {
	if p := s.progs[ps]; p != nil {
		return p, nil
	}
	p, err := collector.LoadProgram(s.spec, ps, &s.maps)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", ps.Name, collector.Explain(err))
	}
	s.progs[ps] = p
	return p, nil
}

// hook is a scheduler tracepoint with its tp_btf and raw_tp programs.
type hook struct {
	tracepoint string
	btf, raw   *ebpf.ProgramSpec
}

// hooks lists sched_switch first: it is attached first, so that every
// start a wakeup notes is ended or re-based by a switch the hooks see.
func (s *Collector) hooks() []hook {
	return []hook{
		{"sched_switch", s.specs.BtfSchedSwitch, s.specs.RawSchedSwitch},
		{"sched_wakeup", s.specs.BtfSchedWakeup, s.specs.RawSchedWakeup},
		{"sched_wakeup_new", s.specs.BtfSchedWakeupNew, s.specs.RawSchedWakeupNew},
	}
}

// Trace adds pid to the processes whose run-queue waits are summed.
func (s *Collector) Trace(pid uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("trace run-queue: collector closed")
	}
	if err := s.maps.Traced.Put(pid, uint8(1)); err != nil {
		return fmt.Errorf("trace run-queue of pid %d: %w", pid, err)
	}
	s.pids[pid] = &rqPID{fresh: true}
	return nil
}

// Untrace forgets pid (it exited) and detaches its GC probes.
func (s *Collector) Untrace(pid uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if err := s.maps.Traced.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, err)
	}
	if err := s.maps.RqSums.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, err)
	}
	delete(s.pids, pid)
	for _, l := range s.gc[pid] {
		errs = append(errs, l.Close())
	}
	delete(s.gc, pid)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("untrace pid %d: %w", pid, err)
	}
	return nil
}

// SetRunqueue attaches (on) or detaches (off) the scheduler tracepoints.
// Attached, they run on every context switch and wakeup of the node (a
// map lookup for tasks of untraced processes), so callers attach them only
// while a traced process is timing out.
func (s *Collector) SetRunqueue(on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("switch run-queue hooks: collector closed")
	}
	if !on {
		var errs []error
		for _, l := range s.rqLinks {
			errs = append(errs, l.Close())
		}
		s.rqLinks, s.rqHooks = nil, ""
		return errors.Join(errs...)
	}
	if s.rqLinks != nil {
		return nil
	}
	var errs []error
	for _, typed := range []bool{true, false} {
		if typed && s.cfg.ForceRawTP {
			continue
		}
		links, err := s.attachSched(typed)
		if err == nil {
			s.rqLinks = links
			s.rqHooks = map[bool]string{true: "tp_btf", false: "raw_tp"}[typed]
			for _, p := range s.pids {
				p.fresh = true // waits summed while detached are not this interval's
			}
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("attach the scheduler tracepoints: %w", errors.Join(errs...))
}

// attachSched loads the three programs, then attaches them: loading takes
// the verifier's time (272 ms measured here, on a busy machine), and the
// hooks must start together. Once all are attached, the time goes into
// the epoch map's second slot: a wait that started before it is void (a
// start noted while the other hooks were not yet watching).
func (s *Collector) attachSched(typed bool) ([]link.Link, error) {
	progs := make([]*ebpf.Program, 0, 3)
	for _, h := range s.hooks() {
		ps := h.raw
		if typed {
			ps = h.btf
		}
		p, err := s.program(ps)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h.tracepoint, err)
		}
		progs = append(progs, p)
	}
	var links []link.Link
	fail := func(err error) ([]link.Link, error) {
		for _, l := range links {
			l.Close()
		}
		return nil, err
	}
	for i, h := range s.hooks() {
		var l link.Link
		var err error
		if typed {
			l, err = link.AttachTracing(link.TracingOptions{Program: progs[i], AttachType: ebpf.AttachTraceRawTp})
		} else {
			l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: h.tracepoint, Program: progs[i]})
		}
		if err != nil {
			return fail(fmt.Errorf("%s: %w", h.tracepoint, collector.Explain(err)))
		}
		links = append(links, l)
	}
	if err := s.maps.Epoch.Put(uint32(1), tick.Mono()); err != nil {
		return fail(fmt.Errorf("note the attachment time: %w", err))
	}
	return links, nil
}

// TraceGC attaches the stop-the-world probes to process pid running bin:
// runtime.stopTheWorldWithSema's entry and every return of
// runtime.startTheWorldWithSema (found by disassembly; never uretprobes).
// They fire once per pause — twice per GC cycle, and for the runtime's
// other stops (ReadMemStats, GOMAXPROCS, goroutine profiles).
func (s *Collector) TraceGC(pid uint32, exe string, bin *gobin.Binary) error {
	stop, err := bin.Func("runtime.stopTheWorldWithSema")
	if err != nil {
		return fmt.Errorf("GC probes: %w", err)
	}
	start, err := bin.Func("runtime.startTheWorldWithSema")
	if err != nil {
		return fmt.Errorf("GC probes: %w", err)
	}
	rets, err := bin.Returns(start)
	if err != nil || len(rets) == 0 {
		return fmt.Errorf("GC probes: find the returns of %s: %v", start.Name, err)
	}
	ex, err := link.OpenExecutable(exe)
	if err != nil {
		return fmt.Errorf("GC probes: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("GC probes: collector closed")
	}
	var links []link.Link
	attach := func(ps *ebpf.ProgramSpec, addr uint64) error {
		p, err := s.program(ps)
		if err != nil {
			return err
		}
		off, err := bin.FileOffset(addr)
		if err != nil {
			return err
		}
		var l link.Link
		if s.multi {
			l, err = ex.UprobeMulti(nil, p, &link.UprobeMultiOptions{Addresses: []uint64{off}, PID: pid})
		} else {
			l, err = ex.Uprobe("", p, &link.UprobeOptions{Address: off, PID: int(pid)})
		}
		if err != nil {
			return fmt.Errorf("attach %s at %#x: %w", ps.Name, addr, collector.Explain(err))
		}
		links = append(links, l)
		return nil
	}
	err = attach(s.specs.GoStwStop, stop.Entry)
	for _, r := range rets {
		if err != nil {
			break
		}
		err = attach(s.specs.GoStwStartRet, r)
	}
	if err != nil {
		for _, l := range links {
			l.Close()
		}
		return fmt.Errorf("GC probes: %w", err)
	}
	s.gc[pid] = append(s.gc[pid], links...)
	return nil
}

// Events delivers run-queue intervals and GC pauses. Closed by Close.
func (s *Collector) Events() <-chan event.Local { return s.events }

func (s *Collector) send(ev event.Local) bool {
	select {
	case s.events <- ev:
	case <-s.done:
		return false
	default:
		s.mu.Lock()
		s.dropped++
		s.mu.Unlock()
	}
	return true
}

func (s *Collector) readGC() {
	defer s.wg.Done()
	s.reader.Consume(100*time.Millisecond /* the program wakes the reader only past a backlog */, s.log, func(raw []byte) bool {
		var p schedTtGcPause
		if len(raw) < binary.Size(p) {
			s.mu.Lock()
			s.decodeEr++
			s.mu.Unlock()
			return true
		}
		if _, err := binary.Decode(raw, binary.NativeEndian, &p); err != nil || p.EndNs < p.StartNs {
			s.mu.Lock()
			s.decodeEr++
			s.mu.Unlock()
			return true
		}
		return s.send(event.Local{Start: p.StartNs, Mono: p.EndNs, PID: p.Tgid, Kind: event.LocalGCPause,
			Lost: time.Duration(p.EndNs - p.StartNs), Count: 1})
	})
}

// poll reads the run-queue sums every interval while the hooks are
// attached.
func (s *Collector) poll() {
	defer s.wg.Done()
	tk := tick.NewTicker(s.cfg.Interval)
	defer tk.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-tk.C:
			tk.Next()
		}
		// While a poll is under way its events (stamped at its start) are
		// not all sent: Progress stays before them.
		s.pollAt.Store(tick.Mono())
		for _, ev := range s.readSums() {
			if !s.send(ev) {
				s.pollAt.Store(0)
				return
			}
		}
		s.pollAt.Store(0)
	}
}

// readSums bumps the epoch (threads count once per interval), reads every
// traced process's cumulative sums and returns the intervals to emit.
func (s *Collector) readSums() []event.Local {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.rqLinks == nil {
		return nil
	}
	s.epoch++
	if err := s.maps.Epoch.Put(uint32(0), s.epoch); err != nil {
		s.log.Warn("run-queue epoch", "err", err)
	}
	now := tick.Mono()
	var out []event.Local
	for pid, st := range s.pids {
		var perCPU []schedTtRqSum
		var cur schedTtRqSum
		if err := s.maps.RqSums.Lookup(pid, &perCPU); err == nil {
			for _, v := range perCPU {
				cur.WaitNs += v.WaitNs
				cur.Waits += v.Waits
				cur.Threads += v.Threads
			}
		} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
			s.log.Warn("read run-queue sums", "pid", pid, "err", err)
			continue
		}
		if st.fresh || cur.WaitNs < st.last.WaitNs {
			st.last, st.lastMono, st.fresh = cur, now, false
			st.lastSent = now
			out = append(out, event.Local{Start: now, Mono: now, PID: pid, Kind: event.LocalRunqueue})
			continue
		}
		wait, threads := cur.WaitNs-st.last.WaitNs, cur.Threads-st.last.Threads
		ev := event.Local{Start: st.lastMono, Mono: now, PID: pid, Kind: event.LocalRunqueue,
			Count: uint32(min(threads, 1<<32-1)), Total: time.Duration(wait)}
		if threads > 0 {
			ev.Lost = min(time.Duration(wait/threads), time.Duration(now-st.lastMono))
		}
		if ev.Lost > 0 || now-st.lastSent >= uint64(s.cfg.Heartbeat) {
			out = append(out, ev)
			st.lastSent = now
			st.last, st.lastMono = cur, now
		}
		// Otherwise nothing was lost: the interval grows until the next
		// wait or heartbeat.
	}
	return out
}

// Stats sums the kernel's per-CPU counters.
func (s *Collector) Stats() (Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st Stats
	if s.closed {
		return st, errors.New("read sched stats: collector closed")
	}
	if err := collector.Counters(s.maps.SchedStats, &st.Hits, &st.Matched, &st.ThreadsFull, &st.GCHits, &st.GCLost); err != nil {
		return st, fmt.Errorf("read sched stats: %w", err)
	}
	st.Dropped, st.DecodeErrors = s.dropped, s.decodeEr
	st.RunqueueOn, st.RunqueueHooks = s.rqLinks != nil, s.rqHooks
	return st, nil
}

// Close detaches everything: stop the readers (closing the ring buffer
// unblocks the GC reader), wait for them, close links, programs, maps,
// then the events channel.
func (s *Collector) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	var errs []error
	if s.reader != nil {
		errs = append(errs, s.reader.Close())
	}
	s.wg.Wait()
	for _, l := range s.rqLinks {
		errs = append(errs, l.Close())
	}
	for _, ls := range s.gc {
		for _, l := range ls {
			errs = append(errs, l.Close())
		}
	}
	for _, p := range s.progs {
		errs = append(errs, p.Close())
	}
	errs = append(errs, s.maps.Close())
	close(s.events)
	return errors.Join(errs...)
}

// Progress is the monotonic time before which every run-queue and GC event
// has been sent on Events (the merge's watermark for this source): the GC
// ring's progress, held back to the start of a run-queue poll under way
// (an idle poller's next events are stamped after now).
func (s *Collector) Progress() uint64 {
	p := s.reader.Progress()
	if t := s.pollAt.Load(); t != 0 && t < p {
		p = t
	}
	return p
}

// Kick makes the reader look at its ring now instead of at its next poll.
func (s *Collector) Kick() { s.reader.Kick() }
