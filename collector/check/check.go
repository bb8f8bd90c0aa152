// Package check answers `tracer check`: can this machine trace, and if not
// what to fix. It really loads and attaches the TCP collector (and tries
// the optional enrichment), then detaches them.
package check

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/collector/enrich"
	"github.com/timeout-tracer/tracer/collector/tcp"
)

// Item is one line of `tracer check`.
type Item struct {
	Name   string
	OK     bool
	Detail string
	Fix    string // what to do when !OK
}

// Report is the answer to "can this machine trace?".
type Report struct {
	Items []Item
	Hooks []tcp.HookStatus
	OK    bool // tracing works: every required piece loaded and attached
}

// Run probes the kernel and really loads and attaches the TCP collector
// (then detaches it): the only honest test that tracing works.
func Run() Report {
	var r Report
	add := func(it Item) { r.Items = append(r.Items, it) }

	add(Item{Name: "kernel", OK: true, Detail: collector.KernelRelease() + " " + runtime.GOARCH})

	caps, err := collector.EffectiveCaps()
	switch {
	case err != nil:
		add(Item{Name: "capabilities", OK: false, Detail: err.Error(), Fix: "run on Linux with /proc mounted"})
	default:
		var have []string
		for _, c := range []struct {
			n   string
			bit uint
		}{{"CAP_SYS_ADMIN", collector.CapSysAdmin}, {"CAP_BPF", collector.CapBPF}, {"CAP_PERFMON", collector.CapPerfmon}} {
			if caps.Has(c.bit) {
				have = append(have, c.n)
			}
		}
		ok := caps.CanLoad()
		add(Item{Name: "capabilities", OK: ok, Detail: "have " + orNone(have),
			Fix: "run as root, or grant CAP_BPF and CAP_PERFMON (CAP_SYS_RESOURCE too on kernels before 5.11)"})
	}

	if _, err := btf.LoadKernelSpec(); err != nil {
		add(Item{Name: "btf", OK: false, Detail: err.Error(), Fix: "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"})
	} else {
		add(Item{Name: "btf", OK: true, Detail: "/sys/kernel/btf/vmlinux"})
	}

	if err := features.HaveMapType(ebpf.RingBuf); err != nil {
		add(Item{Name: "ring buffer", OK: false, Detail: err.Error(), Fix: "BPF ring buffers need Linux 5.8 or later"})
	} else {
		add(Item{Name: "ring buffer", OK: true, Detail: "BPF_MAP_TYPE_RINGBUF"})
	}

	if hz, err := collector.KernelHZ(); err != nil {
		add(Item{Name: "HZ", OK: true, Detail: "unknown (" + err.Error() + "): RTOs assume 250"})
	} else {
		add(Item{Name: "HZ", OK: true, Detail: strconv.Itoa(int(hz))})
	}

	if addr, _ := collector.KallsymsAddr("tcp_write_timer"); addr == 0 {
		add(Item{Name: "kallsyms", OK: true, Detail: "tcp_write_timer not visible: no zero-window events",
			Fix: "run as root with kernel.kptr_restrict<=1"})
	} else {
		add(Item{Name: "kallsyms", OK: true, Detail: "tcp_write_timer found: zero-window events on"})
	}

	if _, err := os.Stat("/sys/kernel/tracing/events"); err != nil {
		add(Item{Name: "tracefs", OK: true, Detail: "not mounted (not needed: tp_btf and raw_tp attach without it)"})
	} else {
		add(Item{Name: "tracefs", OK: true, Detail: "mounted (not needed by the collector)"})
	}

	c, err := tcp.Start(tcp.Config{RingBufferBytes: 64 * 1024})
	if err != nil {
		add(Item{Name: "tcp collector", OK: false, Detail: err.Error(), Fix: fixFor(err)})
	} else {
		r.Hooks = c.Hooks()
		n := 0
		for _, h := range r.Hooks {
			if h.Type != "" {
				n++
			}
		}
		add(Item{Name: "tcp collector", OK: true, Detail: fmt.Sprintf("loaded and attached %d of %d tracepoints", n, len(r.Hooks))})
		if err := c.Close(); err != nil {
			add(Item{Name: "detach", OK: false, Detail: err.Error(), Fix: "report a bug"})
		}
	}

	// Optional: never makes the check fail.
	if e, err := enrich.Start(enrich.Config{}); err != nil {
		add(Item{Name: "enrichment", OK: true, Detail: "not available (optional; tail loss probes come from the tracepoints): " + err.Error()})
	} else {
		add(Item{Name: "enrichment", OK: true, Detail: "tcp_send_loss_probe attached via " + e.Via() + " (optional: every tail loss probe the kernel sends)"})
		if err := e.Close(); err != nil {
			add(Item{Name: "detach enrichment", OK: false, Detail: err.Error(), Fix: "report a bug"})
		}
	}

	r.OK = true
	for _, it := range r.Items {
		r.OK = r.OK && it.OK
	}
	return r
}

func fixFor(err error) string {
	switch {
	case errors.Is(err, collector.ErrPrivileges):
		return "run as root, or grant CAP_BPF and CAP_PERFMON"
	case errors.Is(err, collector.ErrNoBTF):
		return "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"
	case errors.Is(err, tcp.ErrRequiredHook):
		return "this kernel lacks a required tracepoint (Linux 5.15 or later is supported)"
	}
	return "run `tracer check` as root; see README (Requirements)"
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
