package pipeline

import (
	"errors"
	"fmt"
	"sync"

	"github.com/timeout-tracer/tracer/collector/goprobe"
	"github.com/timeout-tracer/tracer/collector/sched"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/sample"
	"github.com/timeout-tracer/tracer/tick"
)

// LocalConfig says which local-cause sources to attach: the time the
// process lost to CPU throttling, run-queue waits and GC pauses.
type LocalConfig struct {
	// Mode is "auto" (the default: cgroup throttling and GC pauses always,
	// the scheduler tracepoints only while the detail tier of some traced
	// process is on, since they run on every context switch of the node),
	// "always" or "never".
	Mode string
	// CgroupRoot is where cgroup filesystems are mounted (a node agent
	// reads the host's, e.g. /host/sys/fs/cgroup). Default /sys/fs/cgroup.
	CgroupRoot string
}

// LocalModes are the values of LocalConfig.Mode.
var LocalModes = []string{"auto", "always", "never"}

// local holds the local-cause sources of a pipeline: one scheduler
// collector (run-queue hooks and GC probes) for every traced process, one
// throttling sampler per process. Their events come out of one channel.
type local struct {
	mode  string
	sched *sched.Collector
	// runqueueAuto: the scheduler hooks follow the detail tiers.
	runqueueAuto bool
	ch           chan event.Local
	done         chan struct{}
	wg           sync.WaitGroup

	// reads shares the cgroup files' reads between the throttling samplers.
	reads *sample.CgroupReads

	mu        sync.Mutex
	throttles map[uint32]*sample.Throttle
	detailOn  map[uint32]bool // processes whose detail tier is on
}

// startLocal validates the mode and loads the scheduler collector. A
// source that cannot work here is logged and left out: the network causes
// must not depend on it.
func (p *Pipeline) startLocal() error {
	l := &p.local
	l.mode = p.cfg.Local.Mode
	if l.mode == "" {
		l.mode = "auto"
	}
	switch l.mode {
	case "never":
		return nil
	case "auto", "always":
	default:
		return fmt.Errorf("local sources %q: want auto, always or never", l.mode)
	}
	l.ch = make(chan event.Local, 1024)
	l.done = make(chan struct{})
	l.throttles = map[uint32]*sample.Throttle{}
	l.reads = sample.NewCgroupReads()
	l.detailOn = map[uint32]bool{}
	s, err := sched.Start(sched.Config{Logger: p.log})
	if err != nil {
		p.log.Warn("run-queue delay and GC pauses not traced", "err", err)
		return nil
	}
	l.sched = s // its events are a source of their own (the pipeline reads its progress)
	l.runqueueAuto = l.mode == "auto"
	if l.mode == "always" {
		p.switchRunqueue(true)
	}
	return nil
}

// forward copies a source's events into the pipeline's local channel.
func (l *local) forward(src <-chan event.Local) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for ev := range src {
			select {
			case l.ch <- ev:
			case <-l.done:
				return
			}
		}
	}()
}

// trackLocal attaches the local sources of process g.
func (p *Pipeline) trackLocal(g *goprobe.Process) {
	l := &p.local
	if l.ch == nil {
		return
	}
	pid := uint32(g.PID())
	th, err := sample.StartThrottle(sample.ThrottleConfig{PID: int(pid), CgroupRoot: p.cfg.Local.CgroupRoot, Reads: l.reads, Logger: p.log})
	if err != nil {
		p.log.Warn("CPU throttling not traced", "pid", pid, "err", err)
	} else {
		l.mu.Lock()
		l.throttles[pid] = th // its first interval says it watches
		l.mu.Unlock()
		l.forward(th.Events())
	}
	if l.sched == nil {
		return
	}
	if err := l.sched.Trace(pid); err != nil {
		p.log.Warn("run-queue delay not traced", "pid", pid, "err", err)
		return
	}
	if err := l.sched.TraceGC(pid, fmt.Sprintf("/proc/%d/exe", pid), g.Binary()); err != nil {
		p.log.Warn("GC pauses not traced", "pid", pid, "err", err)
		return
	}
	// Pauses are events: a zero-length one in the stream says the probes
	// watch from now (recordings carry it, so a replay says 0, not null,
	// for a context without a pause).
	mono := tick.Mono() // the probes watch from now: they are attached
	select {
	case l.ch <- event.Local{Start: mono, Mono: mono, PID: pid, Kind: event.LocalGCPause}:
	case <-l.done:
	}
}

// untrackLocal detaches the local sources of process pid.
func (p *Pipeline) untrackLocal(pid uint32) error {
	l := &p.local
	if l.ch == nil {
		return nil
	}
	l.mu.Lock()
	th := l.throttles[pid]
	delete(l.throttles, pid)
	l.mu.Unlock()
	var errs []error
	if th != nil {
		errs = append(errs, th.Close())
	}
	if l.sched != nil {
		errs = append(errs, l.sched.Untrace(pid))
	}
	p.localDetail(pid, false)
	return errors.Join(errs...)
}

// localDetail follows a process's detail tier: in auto mode the scheduler
// hooks are attached while any traced process has its detail on.
func (p *Pipeline) localDetail(pid uint32, on bool) {
	l := &p.local
	if !l.runqueueAuto || l.detailOn == nil {
		return
	}
	l.mu.Lock()
	was := len(l.detailOn) > 0
	if on {
		l.detailOn[pid] = true
	} else {
		delete(l.detailOn, pid)
	}
	now := len(l.detailOn) > 0
	l.mu.Unlock()
	if was != now {
		p.switchRunqueue(now)
	}
}

// switchRunqueue attaches or detaches the scheduler hooks; a failure is
// logged, never fatal.
func (p *Pipeline) switchRunqueue(on bool) {
	if p.local.sched == nil {
		return
	}
	if err := p.local.sched.SetRunqueue(on); err != nil {
		p.log.Warn("run-queue hooks not switched", "on", on, "err", err)
		return
	}
	p.log.Info("run-queue hooks switched", "on", on)
}

// Sched is the run-queue and GC collector, nil when not attached.
func (p *Pipeline) Sched() *sched.Collector { return p.local.sched }

// Throttle is the cgroup throttling sampler of process pid, nil when not
// attached.
func (p *Pipeline) Throttle(pid uint32) *sample.Throttle {
	p.local.mu.Lock()
	defer p.local.mu.Unlock()
	return p.local.throttles[pid]
}

func (l *local) events() <-chan event.Local { return l.ch }

func (l *local) close() error {
	if l.ch == nil {
		return nil
	}
	var errs []error
	l.mu.Lock()
	ths := l.throttles
	l.throttles = map[uint32]*sample.Throttle{}
	l.mu.Unlock()
	for _, th := range ths {
		errs = append(errs, th.Close())
	}
	if l.sched != nil {
		errs = append(errs, l.sched.Close())
	}
	l.reads.Close()
	close(l.done)
	l.wg.Wait()
	return errors.Join(errs...)
}
