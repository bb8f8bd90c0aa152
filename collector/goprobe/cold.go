package goprobe

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf/link"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/gobin"
)

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

// sharedCold are the cold probes of one executable file, attached for every
// process that runs it (no PID filter: the programs skip processes that are
// not registered in go_procs).
type sharedCold struct {
	exe   *link.Executable
	links []link.Link
	refs  int
	// detached: the storm guard took the probes off (SetExeCold); they
	// come back with SetExeCold(true).
	detached bool
}

// holdCold attaches the cold sites of p's executable, or takes a reference
// on those already attached for it.
func (n *Node) holdCold(p *Process, shared bool) error {
	if !shared {
		// One process only: filter in the kernel by PID, so other processes
		// running the same file never trap.
		links, err := attachSites(p.cold, func(s site) (link.Link, error) { return p.uprobe(s) })
		if err != nil {
			return err
		}
		sc := &sharedCold{refs: 1, links: links}
		n.mu.Lock()
		n.exes[p.key] = sc
		n.mu.Unlock()
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if sc, ok := n.exes[p.key]; ok {
		sc.refs++
		return nil
	}
	links, err := n.attachShared(p)
	if err != nil {
		return err
	}
	n.exes[p.key] = &sharedCold{exe: p.exe, refs: 1, links: links}
	return nil
}

// attachShared attaches the cold sites of p's executable for every process
// running the file (the node's shared probes).
func (n *Node) attachShared(p *Process) ([]link.Link, error) {
	return attachSites(p.cold, func(s site) (link.Link, error) { return n.attachUprobe(p, s, 0) })
}

// SetExeCold detaches (off) or reattaches (on) the shared cold probes of
// one executable file, for the node agent's storm guard: their traps cost
// every process running the file, so they come off together. The processes
// stay registered; expiries meanwhile are not seen.
func (n *Node) SetExeCold(key gobin.FileID, on bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	sc, ok := n.exes[key]
	if !ok || sc.detached == !on {
		return nil
	}
	if !on {
		err := collector.CloseLinks(sc.links)
		sc.links, sc.detached = nil, true
		return err
	}
	var p *Process
	for _, q := range n.procs {
		if q.key == key {
			p = q
			break
		}
	}
	if p == nil {
		return fmt.Errorf("reattach the probes of %v: no traced process runs it", key)
	}
	links, err := n.attachShared(p)
	if err != nil {
		return err
	}
	sc.links, sc.detached = links, false
	return nil
}

// releaseCold drops p's reference on its executable's cold probes and
// detaches them with the last one.
func (n *Node) releaseCold(p *Process) error {
	n.mu.Lock()
	sc, ok := n.exes[p.key]
	if !ok || p.exe == nil {
		n.mu.Unlock()
		return nil
	}
	sc.refs--
	if sc.refs > 0 {
		n.mu.Unlock()
		return nil
	}
	delete(n.exes, p.key)
	n.mu.Unlock()
	return collector.CloseLinks(sc.links)
}
