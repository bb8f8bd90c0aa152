package goprobe

import "errors"

// errColdShared: in node mode a process's cold probes are shared with
// every process running the same executable; one process cannot take them
// away from the others.
var errColdShared = errors.New("cold probes are shared by the executable's processes: only a process traced alone (Start) can detach its own")

// SetCold attaches (on) or detaches (off) the cold tier of a process
// traced alone (Start): the expiry probes that are otherwise attached for
// the probes' whole life. Only the storm guard detaches them, when expiries
// come so fast that their traps would cost the target more than a tracer
// may take; expiries while detached are not seen.
func (p *Process) SetCold(on bool) error {
	if !p.own {
		return errColdShared
	}
	if on == p.Cold() {
		return nil
	}
	if !on {
		return p.node.releaseCold(p)
	}
	return p.node.holdCold(p, false)
}

// Cold reports whether the process's cold tier is attached.
func (p *Process) Cold() bool {
	p.node.mu.Lock()
	defer p.node.mu.Unlock()
	_, ok := p.node.exes[p.key]
	return ok
}
