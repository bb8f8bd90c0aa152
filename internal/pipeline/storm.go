package pipeline

import (
	"fmt"
	"time"

	"github.com/timeout-tracer/tracer/internal/storm"
)

// guardTick runs the storm guard four times a second: it detaches every probe
// of the process while its probe hit rate is over the limit, and
// reattaches the cold tier (and the detail tier if the mode wants it)
// after the cool-down. Each switch is said to the sink and the log.
func (p *Pipeline) guardTick(now time.Time) error {
	if p.guard == nil || now.Sub(p.guardAt) < storm.Interval {
		return nil
	}
	defer p.snapStorm(now)
	p.guardAt = now
	s, err := p.goP.Stats()
	if err != nil {
		p.log.Warn("storm guard: probe counters unreadable", "err", err)
		return nil
	}
	d, reason := p.guard.Tick(now, s.UprobeHits(), s.ExpiryHits)
	pid := uint32(p.cfg.PID)
	ps := p.proc(pid)
	switch d {
	case storm.Detach:
		p.log.Warn("storm guard: probes detached", "pid", p.cfg.PID, "reason", reason)
		if err := p.goP.SetCold(false); err != nil {
			p.log.Warn("storm guard: cold probes not detached", "err", err)
		}
		if ps != nil && p.goP.Detail() {
			p.switchDetail(ps, false, "storm guard")
		}
		if p.sink.Storm != nil {
			return p.sink.Storm(now, pid, true, reason)
		}
	case storm.Resume:
		p.log.Info("storm guard: probes reattached", "pid", p.cfg.PID, "reason", reason)
		if err := p.goP.SetCold(true); err != nil {
			// Said, and tried again at the next tick: never silently unwatched.
			p.log.Warn("storm guard: cold probes not reattached", "err", err)
			p.guard.Retrip(now)
			if p.sink.Storm != nil {
				return p.sink.Storm(now, pid, true, fmt.Sprintf("cold probes not reattached: %v", err))
			}
			return nil
		}
		if ps != nil && (p.cfg.Detail == "always" || (p.cfg.Detail == "auto" && ps.ctl.On())) {
			p.switchDetail(ps, true, "storm guard cool-down over")
		}
		if p.sink.Storm != nil {
			return p.sink.Storm(now, pid, false, reason)
		}
	}
	return nil
}

// snapStorm publishes the guard's counters for StormStats.
func (p *Pipeline) snapStorm(now time.Time) {
	s := p.guard.Stats(now)
	p.stormMu.Lock()
	p.stormSnap = s
	p.stormMu.Unlock()
}

// StormStats are the storm guard's counters (zero when it is off), as of
// its last look (at most storm.Interval ago while Run runs, final after).
// Safe to call from any goroutine (metrics scrapes).
func (p *Pipeline) StormStats() storm.Stats {
	p.stormMu.Lock()
	defer p.stormMu.Unlock()
	return p.stormSnap
}

// stormTripped says whether the storm guard holds the probes detached.
func (p *Pipeline) stormTripped() bool { return p.guard != nil && p.guard.Tripped() }
