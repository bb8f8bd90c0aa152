package pipeline

import (
	"fmt"
	"time"

	"github.com/timeout-tracer/tracer/gobin"
	"github.com/timeout-tracer/tracer/pipeline/storm"
	"github.com/timeout-tracer/tracer/tick"
)

// guardTick runs the storm guard four times a second: it detaches every probe
// of the process while its probe hit rate is over the limit, and
// reattaches the cold tier (and the detail tier if the mode wants it)
// after the cool-down. Each switch is said to the log, and queued for the sink. The control
// loop's goroutine, as everything of the guards.
func (p *Pipeline) guardTick(now time.Time) {
	if p.guard == nil || now.Sub(p.guardAt) < guardDue {
		return
	}
	defer p.snapStorm(now)
	p.guardAt = now
	s, err := p.goP.Stats()
	if err != nil {
		p.log.Warn("storm guard: probe counters unreadable", "err", err)
		return
	}
	extra := p.goP.Detail() || (p.cfg.Audit && !p.auditShed)
	d, reason := p.guard.TickCold(now, s.UprobeHits(), s.ColdRuns, s.ExpiryHits, extra)
	pid := uint32(p.cfg.PID)
	ps := p.proc(pid)
	switch d {
	case storm.Shed:
		p.log.Warn("storm guard: detail and call probes detached", "pid", p.cfg.PID, "reason", reason)
		if ps != nil && p.goP.Detail() {
			p.switchDetail(ps, false, "storm guard: shed")
		}
		p.shedAudit(true)
		p.emit(Switch{Time: now, PID: pid, Storm: true, Shed: true, On: true, Reason: reason})
	case storm.Unshed:
		p.log.Info("storm guard: detail and call probes may come back", "pid", p.cfg.PID, "reason", reason)
		p.shedAudit(false)
		if ps != nil && (p.cfg.Detail == "always" || (p.cfg.Detail == "auto" && ps.ctl.On())) {
			p.switchDetail(ps, true, "storm guard hold over")
		}
		p.emit(Switch{Time: now, PID: pid, Storm: true, Shed: true, On: false, Reason: reason})
	case storm.Detach:
		p.log.Warn("storm guard: probes detached", "pid", p.cfg.PID, "reason", reason)
		if err := p.goP.SetCold(false); err != nil {
			p.log.Warn("storm guard: cold probes not detached", "err", err)
		}
		if ps != nil && p.goP.Detail() {
			p.switchDetail(ps, false, "storm guard")
		}
		p.emit(Switch{Time: now, PID: pid, Storm: true, On: true, Reason: reason})
	case storm.Resume:
		p.log.Info("storm guard: probes reattached", "pid", p.cfg.PID, "reason", reason)
		p.shedAudit(false)
		if err := p.goP.SetCold(true); err != nil {
			// Said, and tried again at the next tick: never silently unwatched.
			p.log.Warn("storm guard: cold probes not reattached", "err", err)
			p.guard.Retrip(now)
			p.emit(Switch{Time: now, PID: pid, Storm: true, On: true, Reason: fmt.Sprintf("cold probes not reattached: %v", err)})
			return
		}
		if ps != nil && (p.cfg.Detail == "always" || (p.cfg.Detail == "auto" && ps.ctl.On())) {
			p.switchDetail(ps, true, "storm guard cool-down over")
		}
		p.emit(Switch{Time: now, PID: pid, Storm: true, On: false, Reason: reason})
	}
}

// shedAudit detaches (on) or reattaches the call probes of --audit while
// the storm guard sheds (Start only; the control loop's goroutine).
func (p *Pipeline) shedAudit(on bool) {
	if !p.cfg.Audit || p.auditShed == on {
		return
	}
	if err := p.goP.SetAudit(!on); err != nil {
		p.log.Warn("storm guard: call probes not switched", "detached", on, "err", err)
		return
	}
	p.auditShed = on
}

// guardDue is how long after its last look a guard looks again: the
// control loop ticks every storm.Interval, and a tick a little early must
// not skip a look.
const guardDue = storm.Interval - storm.Interval/10

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

// stormTripped says whether the storm guard holds the detail tier off
// (every probe detached, or the detail and call probes shed).
func (p *Pipeline) stormTripped() bool { return p.guard != nil && p.guard.Shedding() }

// exeGuard is the storm guard of one executable file in node mode: the
// cold probes are shared by the processes running it, so their traps come
// off, and back, together.
type exeGuard struct {
	g        *storm.Guard
	expiries uint64 // expiries delivered for the file's processes
	since    uint64 // monotonic time of the last reattach: older expiries (a backlog) do not count
}

// countExpiry feeds the node mode's guards: each expiry delivered is a
// cold-probe hit of its process's executable (the detail tier's hits are
// not counted per process in BPF; they follow expiries, so a storm of
// them trips the guard through its expiries).
func (p *Pipeline) countExpiry(ps *procState, mono uint64) {
	if !p.node || p.cfg.Storm.MaxHitsPerSec == 0 {
		return
	}
	k := ps.probes.Key()
	if p.exeGuards == nil {
		p.exeGuards = map[gobin.FileID]*exeGuard{}
	}
	eg := p.exeGuards[k]
	if eg == nil {
		eg = &exeGuard{g: storm.New(p.cfg.Storm)}
		p.exeGuards[k] = eg
	}
	if mono >= eg.since {
		eg.expiries++
	}
}

// nodeGuardTick runs the per-executable guards of node mode.
func (p *Pipeline) nodeGuardTick(now time.Time) {
	if !p.node || len(p.exeGuards) == 0 || now.Sub(p.guardAt) < guardDue {
		return
	}
	p.guardAt = now
	var total storm.Stats
	for k, eg := range p.exeGuards {
		d, reason := eg.g.Tick(now, eg.expiries, eg.expiries)
		var procs []*procState
		p.mu.Lock()
		for _, ps := range p.procs {
			if ps.probes.Key() == k {
				procs = append(procs, ps)
			}
		}
		p.mu.Unlock()
		switch d {
		case storm.Detach:
			if err := p.goN.SetExeCold(k, false); err != nil {
				p.log.Warn("storm guard: cold probes not detached", "err", err)
			}
			for _, ps := range procs {
				pid := uint32(ps.probes.PID())
				p.log.Warn("storm guard: probes detached", "pid", pid, "reason", reason)
				if ps.probes.Detail() {
					p.switchDetail(ps, false, "storm guard")
				}
				p.emit(Switch{Time: now, PID: pid, Storm: true, On: true, Reason: reason})
			}
		case storm.Resume:
			if len(procs) == 0 {
				delete(p.exeGuards, k) // nobody runs it any more
				continue
			}
			if err := p.goN.SetExeCold(k, true); err != nil {
				p.log.Warn("storm guard: cold probes not reattached", "err", err)
				eg.g.Retrip(now)
				continue
			}
			eg.since = tick.Mono()
			for _, ps := range procs {
				pid := uint32(ps.probes.PID())
				p.log.Info("storm guard: probes reattached", "pid", pid, "reason", reason)
				if p.cfg.Detail == "always" || (p.cfg.Detail == "auto" && ps.ctl.On()) {
					p.switchDetail(ps, true, "storm guard cool-down over")
				}
				p.emit(Switch{Time: now, PID: pid, Storm: true, On: false, Reason: reason})
			}
		default:
			if len(procs) == 0 && !eg.g.Tripped() {
				s := eg.g.Stats(now)
				p.goneStorm.Trips += s.Trips
				p.goneStorm.Detached += s.Detached
				p.goneStorm.UnseenEstimate += s.UnseenEstimate
				delete(p.exeGuards, k)
				continue
			}
		}
		s := eg.g.Stats(now)
		total.Trips += s.Trips
		total.Detached += s.Detached
		total.UnseenEstimate += s.UnseenEstimate
	}
	total.Trips += p.goneStorm.Trips
	total.Detached += p.goneStorm.Detached
	total.UnseenEstimate += p.goneStorm.UnseenEstimate
	p.stormMu.Lock()
	p.stormSnap = total
	p.stormMu.Unlock()
}

// exeTripped reports whether node mode's guard has the probes of ps's
// executable off.
func (p *Pipeline) exeTripped(ps *procState) bool {
	eg := p.exeGuards[ps.probes.Key()]
	return eg != nil && eg.g.Tripped()
}
