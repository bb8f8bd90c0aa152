package tcp

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/timeout-tracer/tracer/collector"
)

// hook is one kernel tracepoint the collector attaches to. Each has a
// tp_btf program and a raw_tp twin built from the same C body.
type hook struct {
	tracepoint string
	btf, raw   *ebpf.ProgramSpec
	required   bool   // without it the collector cannot do its job
	purpose    string // shown by `tracer check`
	// fallbackFor names a hook this one stands in for when that one is missing.
	fallbackFor string
}

// hooks are the tracepoints in the order they are attached.
func hooks(p *tcpProgramSpecs) []hook {
	return []hook{
		{"tcp_retransmit_skb", p.BtfRetransmitSkb, p.RawRetransmitSkb, true, "retransmits: rto, fast retransmit, tlp, syn retry", ""},
		{"inet_sock_set_state", p.BtfInetSockSetState, p.RawInetSockSetState, true, "connect, failed connect, owner at connect/listen", ""},
		{"tcp_receive_reset", p.BtfTcpReceiveReset, p.RawTcpReceiveReset, true, "resets received", ""},
		{"tcp_destroy_sock", p.BtfTcpDestroySock, p.RawTcpDestroySock, true, "forget closed sockets", ""},
		{"inet_sk_error_report", p.BtfInetSkErrorReport, p.RawInetSkErrorReport, false, "socket errors (ETIMEDOUT, ECONNRESET)", ""},
		{"tcp_send_reset", p.BtfTcpSendReset, p.RawTcpSendReset, false, "resets sent", ""},
		{"tcp_retransmit_synack", p.BtfTcpRetransmitSynack, p.RawTcpRetransmitSynack, false, "server-side SYN-ACK retries", ""},
		{"sock_send_length", p.BtfSockSendLength, p.RawSockSendLength, false, "owner of sockets on send (6.3+)", ""},
		{"sock_recv_length", p.BtfSockRecvLength, p.RawSockRecvLength, false, "owner of sockets on receive (6.3+)", ""},
		{"tcp_rcv_space_adjust", p.BtfTcpRcvSpaceAdjust, p.RawTcpRcvSpaceAdjust, false, "owner on receive where sock_recv_length is missing", "sock_recv_length"},
		{"timer_expire_entry", p.BtfTimerExpireEntry, p.RawTimerExpireEntry, false, "zero-window probe timer", ""},
	}
}

// attachAll attaches each hook as tp_btf, falling back to raw_tp per hook.
func (c *Collector) attachAll(spec *ebpf.CollectionSpec, hs []hook, forceRaw bool) error {
	attached := map[string]bool{}
	for _, h := range hs {
		st := HookStatus{Tracepoint: h.tracepoint, Required: h.required, Purpose: h.purpose}
		if h.fallbackFor != "" && attached[h.fallbackFor] {
			st.Skipped = h.fallbackFor + " is attached"
			c.hooks = append(c.hooks, st)
			continue
		}
		var errs []error
		if !forceRaw {
			if err := c.attachOne(spec, h.btf, h.tracepoint, true); err == nil {
				st.Type = "tp_btf"
			} else {
				errs = append(errs, fmt.Errorf("tp_btf: %w", err))
			}
		}
		if st.Type == "" {
			if err := c.attachOne(spec, h.raw, h.tracepoint, false); err == nil {
				st.Type = "raw_tp"
				st.Fallback = errors.Join(errs...)
			} else {
				errs = append(errs, fmt.Errorf("raw_tp: %w", err))
			}
		}
		if st.Type == "" {
			st.Err = errors.Join(errs...)
			if h.required {
				return fmt.Errorf("attach %s: %w: %w", h.tracepoint, ErrRequiredHook, st.Err)
			}
			c.log.Warn("optional tracepoint not attached", "tracepoint", h.tracepoint, "purpose", h.purpose, "err", st.Err)
		}
		attached[h.tracepoint] = st.Type != ""
		c.hooks = append(c.hooks, st)
	}
	return nil
}

// attachOne loads program ps on its own against the collector's maps and
// attaches it to the tracepoint.
func (c *Collector) attachOne(spec *ebpf.CollectionSpec, ps *ebpf.ProgramSpec, tracepoint string, typed bool) error {
	prog, err := collector.LoadProgram(spec, ps, &c.maps)
	if err != nil {
		return fmt.Errorf("load %s: %w", ps.Name, collector.Explain(err))
	}
	l, err := attach(prog, tracepoint, typed)
	if err != nil {
		prog.Close()
		return fmt.Errorf("attach %s: %w", ps.Name, err)
	}
	c.progs = append(c.progs, prog)
	c.tps = append(c.tps, tracepoint)
	c.links = append(c.links, l)
	return nil
}

// attach links prog to its tracepoint, as tp_btf (typed) or raw_tp.
func attach(prog *ebpf.Program, tracepoint string, typed bool) (link.Link, error) {
	var l link.Link
	var err error
	if typed {
		l, err = link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
	} else {
		l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: tracepoint, Program: prog})
	}
	if err != nil {
		return nil, collector.Explain(err)
	}
	return l, nil
}

// HookStatus says how one tracepoint was attached, or why not.
type HookStatus struct {
	Tracepoint string
	Type       string // "tp_btf", "raw_tp", or "" when not attached
	Required   bool
	Purpose    string
	Err        error // why it is not attached; nil when attached or not needed
	Fallback   error // why tp_btf was not used when raw_tp was
	Skipped    string
	// OnDemand, when set, says when the hook is attached: it loaded and
	// attached at start (so it works on this kernel) and was detached
	// until then.
	OnDemand string
}
