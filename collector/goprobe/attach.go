package goprobe

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf/link"

	"github.com/timeout-tracer/tracer/collector"
)

// attachSites attaches every site with attach; on an error it detaches
// what it attached.
func attachSites(sites []site, attach func(site) (link.Link, error)) ([]link.Link, error) {
	links := make([]link.Link, 0, len(sites))
	for _, s := range sites {
		l, err := attach(s)
		if err != nil {
			collector.CloseLinks(links)
			return nil, err
		}
		links = append(links, l)
	}
	return links, nil
}

// attachUprobe attaches program s.prog at s.addr of p's executable, for
// process pid only (0: every process running the file).
func (n *Node) attachUprobe(p *Process, s site, pid int) (link.Link, error) {
	off, err := p.bin.FileOffset(s.addr)
	if err != nil {
		return nil, err
	}
	var l link.Link
	if n.multi {
		l, err = p.exe.UprobeMulti(nil, s.prog, &link.UprobeMultiOptions{Addresses: []uint64{off}, PID: uint32(pid)})
	} else {
		l, err = p.exe.Uprobe("", s.prog, &link.UprobeOptions{Address: off, PID: pid})
	}
	if err != nil {
		if !n.multi && errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("attach %s at %#x: %w (no uprobe_multi links here (kernel before 6.6, or TT_UPROBE=perf), and perf uprobes need CAP_SYS_ADMIN since the 2025 fix \"perf/core: Require CAP_SYS_ADMIN for uprobes\": run as root with CAP_SYS_ADMIN)", s.name, s.addr, err)
		}
		return nil, fmt.Errorf("attach %s at %#x: %w", s.name, s.addr, collector.Explain(err))
	}
	return l, nil
}

func (p *Process) uprobe(s site) (link.Link, error) {
	return p.node.attachUprobe(p, s, p.pid)
}
