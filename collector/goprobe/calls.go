package goprobe

import (
	"fmt"

	"github.com/timeout-tracer/tracer/collector"
)

// SetAudit attaches (on) or detaches the call probes on their own, for
// deadline audits, whatever the detail tier does.
func (p *Process) SetAudit(on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == (p.audit != nil) {
		return nil
	}
	if !on {
		err := collector.CloseLinks(p.audit)
		p.audit = nil
		return err
	}
	calls := p.callSites()
	if len(calls) == 0 {
		return fmt.Errorf("audit: no net/http or gRPC client call site in this binary")
	}
	if !p.ctxWalk {
		return fmt.Errorf("audit: the context types of this binary are not known, so calls without a deadline cannot be told apart")
	}
	for _, s := range calls {
		l, err := p.uprobe(s)
		if err != nil {
			for _, l := range p.audit {
				l.Close()
			}
			p.audit = nil
			return err
		}
		p.audit = append(p.audit, l)
	}
	return nil
}

// callSites are the outbound-call probes: net/http round trips and gRPC
// streams (the gRPC client's call probe, which the audit attaches with
// net/http's round trips).
func (p *Process) callSites() []site {
	sites := append([]site(nil), p.tripSites...)
	for _, s := range p.ext.sites {
		if s.prog == p.objs.calls.GoGrpcNewStream {
			sites = append(sites, s)
		}
	}
	return sites
}
