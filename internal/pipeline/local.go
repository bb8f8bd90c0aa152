package pipeline

import (
	"errors"
	"fmt"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/event"
)

// LocalConfig says which local-cause sources to attach: the time the
// process lost to CPU throttling, run-queue waits and GC pauses.
type LocalConfig struct {
	// Mode is "auto" (the default: cgroup throttling and GC pauses always,
	// the scheduler tracepoints only while the detail tier is on, since they
	// run on every context switch of the node), "always" or "never".
	Mode string
	// CgroupRoot is where cgroup filesystems are mounted (a node agent
	// reads the host's, e.g. /host/sys/fs/cgroup). Default /sys/fs/cgroup.
	CgroupRoot string
}

// LocalModes are the values of LocalConfig.Mode.
var LocalModes = []string{"auto", "always", "never"}

// local holds the local-cause sources of one pipeline.
type local struct {
	throttle *collector.Throttle
	sched    *collector.Sched
	// runqueueAuto: the scheduler hooks follow the detail tier.
	runqueueAuto bool
}

// startLocal attaches what cfg asks for. A source that cannot work here
// (no cgroup CPU controller, no stop-the-world symbol) is logged and left
// out: the network causes must not depend on it.
func (p *Pipeline) startLocal() error {
	mode := p.cfg.Local.Mode
	if mode == "" {
		mode = "auto"
	}
	switch mode {
	case "never":
		return nil
	case "auto", "always":
	default:
		return fmt.Errorf("local sources %q: want auto, always or never", mode)
	}
	pid := uint32(p.cfg.PID)
	mono := monoNow()
	th, err := collector.StartThrottle(collector.ThrottleConfig{PID: p.cfg.PID, CgroupRoot: p.cfg.Local.CgroupRoot, Logger: p.log})
	if err != nil {
		p.log.Warn("CPU throttling not traced", "pid", pid, "err", err)
	} else {
		p.local.throttle = th // its first interval says it watches
	}
	s, err := collector.StartSched(collector.SchedConfig{Logger: p.log})
	if err != nil {
		p.log.Warn("run-queue delay and GC pauses not traced", "pid", pid, "err", err)
		return nil
	}
	p.local.sched = s
	if err := s.Trace(pid); err != nil {
		return err
	}
	if err := s.TraceGC(pid, p.goP.Binary().AttachPath, p.goP.Binary()); err != nil {
		p.log.Warn("GC pauses not traced", "pid", pid, "err", err)
	} else {
		// Pauses are events: a zero-length one in the stream says the
		// probes watch from now (recordings carry it, so a replay says 0,
		// not null, for a context without a pause).
		p.buf = append(p.buf, &event.Local{Start: mono, Mono: mono, PID: pid, Kind: event.LocalGCPause})
	}
	p.local.runqueueAuto = mode == "auto"
	if mode == "always" {
		p.switchRunqueue(true)
	}
	return nil
}

// switchRunqueue attaches or detaches the scheduler hooks; a failure is
// logged, never fatal.
func (p *Pipeline) switchRunqueue(on bool) {
	if p.local.sched == nil {
		return
	}
	if err := p.local.sched.SetRunqueue(on); err != nil {
		p.log.Warn("run-queue hooks not switched", "pid", p.cfg.PID, "on", on, "err", err)
		return
	}
	p.log.Info("run-queue hooks switched", "pid", p.cfg.PID, "on", on)
}

// Sched is the run-queue and GC collector, nil when not attached.
func (p *Pipeline) Sched() *collector.Sched { return p.local.sched }

// Throttle is the cgroup throttling sampler, nil when not attached.
func (p *Pipeline) Throttle() *collector.Throttle { return p.local.throttle }

func (l *local) throttleEvents() <-chan event.Local {
	if l.throttle == nil {
		return nil
	}
	return l.throttle.Events()
}

func (l *local) schedEvents() <-chan event.Local {
	if l.sched == nil {
		return nil
	}
	return l.sched.Events()
}

func (l *local) close() error {
	var errs []error
	if l.throttle != nil {
		errs = append(errs, l.throttle.Close())
	}
	if l.sched != nil {
		errs = append(errs, l.sched.Close())
	}
	return errors.Join(errs...)
}
