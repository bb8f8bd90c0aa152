// Package check answers `tracer check`: can this machine trace, and if not
// what to fix. It really loads and attaches the TCP collector (and tries
// the optional enrichment), then does to one process what `tracer trace
// --pid` does (opens its /proc entries, analyses its executable, attaches
// the Go deadline uprobes), and detaches everything.
package check

import (
	"errors"
	"fmt"
	"io/fs"
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
	Warn   bool // OK, but something a user may need is missing (Fix says what)
	Skip   bool // not checked: an earlier failure makes it moot (Detail says which)
	Detail string
	Fix    string // what to do when !OK or Warn
}

// Report is the answer to "can this machine trace?".
type Report struct {
	Items []Item
	Hooks []tcp.HookStatus
	OK    bool // tracing works: every required piece loaded and attached
}

// Config says what to check besides the kernel.
type Config struct {
	// PID is the process whose tracing to check: its /proc entries are
	// opened, its executable analysed and the deadline probes really
	// attached to it, as `tracer trace --pid` would. 0: the tracer's own
	// process (a Go program too), which needs no ptrace access.
	PID int
}

// noCaps is the Detail of a check skipped for lack of capabilities.
const noCaps = "not checked: loading BPF needs the capabilities above"

// Run probes the kernel, really loads and attaches the TCP collector, and
// really attaches the Go probes (uprobes) to a process, then detaches
// everything: the only honest test that tracing works. Each failure names
// the capability or setting it lacks; a probe that could not run for lack
// of privileges is skipped, never blamed on the kernel.
func Run(cfg Config) Report {
	var r Report
	add := func(it ...Item) { r.Items = append(r.Items, it...) }

	add(Item{Name: "kernel", OK: true, Detail: collector.KernelRelease() + " " + runtime.GOARCH})

	caps, err := collector.EffectiveCaps()
	if err != nil {
		add(Item{Name: "capabilities", Detail: err.Error(), Fix: "run on Linux with /proc mounted"})
	} else {
		add(capabilityItem(caps))
	}
	loadable := err == nil && caps.CanLoad()
	add(unprivilegedBPFItem(caps))

	if _, err := btf.LoadKernelSpec(); err != nil {
		add(Item{Name: "btf", Detail: err.Error(), Fix: "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"})
	} else {
		add(Item{Name: "btf", OK: true, Detail: "/sys/kernel/btf/vmlinux"})
	}

	// Without the capabilities the probe fails with EPERM, which says
	// nothing about the kernel: skipped, not "needs Linux 5.8".
	if !loadable {
		add(Item{Name: "ring buffer", Skip: true, Detail: noCaps})
	} else {
		switch err := features.HaveMapType(ebpf.RingBuf); {
		case err == nil:
			add(Item{Name: "ring buffer", OK: true, Detail: "BPF_MAP_TYPE_RINGBUF"})
		case errors.Is(err, ebpf.ErrNotSupported):
			add(Item{Name: "ring buffer", Detail: err.Error(), Fix: "BPF ring buffers need Linux 5.8 or later"})
		default:
			add(Item{Name: "ring buffer", Detail: err.Error(), Fix: fixFor(err)})
		}
	}

	if hz, err := collector.KernelHZ(); err != nil {
		add(Item{Name: "HZ", OK: true, Detail: "unknown (" + err.Error() + "): RTOs assume 250"})
	} else {
		add(Item{Name: "HZ", OK: true, Detail: strconv.Itoa(int(hz))})
	}

	if addr, _ := collector.KallsymsAddr("tcp_write_timer"); addr == 0 {
		add(Item{Name: "kallsyms", OK: true, Warn: true, Detail: "tcp_write_timer not visible: no zero-window events",
			Fix: "grant CAP_SYSLOG, or run as root with kernel.kptr_restrict<=1"})
	} else {
		add(Item{Name: "kallsyms", OK: true, Detail: "tcp_write_timer found: zero-window events on"})
	}

	switch _, err := os.Stat("/sys/kernel/tracing/events"); {
	case err == nil:
		add(Item{Name: "tracefs", OK: true, Detail: "mounted (not needed by the collector)"})
	case errors.Is(err, fs.ErrPermission):
		add(Item{Name: "tracefs", OK: true, Detail: "closed to this user (not needed: tp_btf and raw_tp attach without it)"})
	default:
		add(Item{Name: "tracefs", OK: true, Detail: "not mounted (not needed: tp_btf and raw_tp attach without it)"})
	}

	if !loadable {
		add(Item{Name: "tcp collector", Skip: true, Detail: noCaps})
	} else if c, err := tcp.Start(tcp.Config{RingBufferBytes: 64 * 1024}); err != nil {
		add(Item{Name: "tcp collector", Detail: err.Error(), Fix: fixFor(err)})
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
			add(Item{Name: "detach", Detail: err.Error(), Fix: "report a bug"})
		}
	}

	// Optional: never makes the check fail.
	if !loadable {
		add(Item{Name: "enrichment", OK: true, Skip: true, Detail: noCaps + " (optional)"})
	} else if e, err := enrich.Start(enrich.Config{}); err != nil {
		add(Item{Name: "enrichment", OK: true, Detail: "not available (optional; tail loss probes come from the tracepoints): " + err.Error()})
	} else {
		add(Item{Name: "enrichment", OK: true, Detail: "tcp_send_loss_probe attached via " + e.Via() + " (optional: every tail loss probe the kernel sends)"})
		if err := e.Close(); err != nil {
			add(Item{Name: "detach enrichment", Detail: err.Error(), Fix: "report a bug"})
		}
	}

	add(process(cfg.PID, caps, loadable)...)

	r.OK = true
	for _, it := range r.Items {
		r.OK = r.OK && it.OK
	}
	return r
}

// capabilityItem names what the process has and, when it cannot load BPF,
// exactly which capabilities it lacks.
func capabilityItem(caps collector.Caps) Item {
	var have []string
	for _, c := range []uint{collector.CapSysAdmin, collector.CapBPF, collector.CapPerfmon, collector.CapSysPtrace, collector.CapSysResource} {
		if caps.Has(c) {
			have = append(have, collector.CapName(c))
		}
	}
	it := Item{Name: "capabilities", OK: caps.CanLoad(), Detail: "have " + orNone(have)}
	if !it.OK {
		var missing []string
		if !caps.Has(collector.CapBPF) {
			missing = append(missing, "CAP_BPF (the bpf() syscall: maps, ring buffers, programs)")
		}
		if !caps.Has(collector.CapPerfmon) {
			missing = append(missing, "CAP_PERFMON (tracing programs and their links)")
		}
		it.Fix = "run as root, or grant " + strings.Join(missing, " and ") + "; CAP_SYS_RESOURCE too on kernels before 5.11"
	}
	return it
}

// unprivilegedBPFItem reports kernel.unprivileged_bpf_disabled: without
// CAP_BPF (or CAP_SYS_ADMIN) bpf() is refused outright when it is set,
// whatever else the process may do.
func unprivilegedBPFItem(caps collector.Caps) Item {
	it := Item{Name: "unprivileged bpf", OK: true}
	b, err := os.ReadFile("/proc/sys/kernel/unprivileged_bpf_disabled")
	if err != nil {
		it.Detail = "kernel.unprivileged_bpf_disabled unreadable: " + err.Error()
		return it
	}
	v := strings.TrimSpace(string(b))
	switch {
	case caps.Has(collector.CapBPF) || caps.Has(collector.CapSysAdmin):
		it.Detail = "kernel.unprivileged_bpf_disabled=" + v + " (no matter: CAP_BPF or CAP_SYS_ADMIN held)"
	case v == "0":
		it.Detail = "kernel.unprivileged_bpf_disabled=0: bpf() open to everyone, but tracing programs still need CAP_BPF and CAP_PERFMON"
	default:
		it.OK = false
		it.Detail = "kernel.unprivileged_bpf_disabled=" + v + ": bpf() refused to processes without CAP_BPF"
		it.Fix = "grant CAP_BPF (and CAP_PERFMON), or run as root; do not lower the sysctl for this"
	}
	return it
}

// fixFor says what to do about a collector that failed to start.
func fixFor(err error) string {
	switch {
	case errors.Is(err, collector.ErrPrivileges):
		return "run as root, or grant CAP_BPF and CAP_PERFMON"
	case errors.Is(err, collector.ErrNoBTF):
		return "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"
	case errors.Is(err, tcp.ErrRequiredHook):
		return "this kernel lacks a required tracepoint (Linux 5.15 or later is supported)"
	case errors.Is(err, os.ErrPermission):
		// Reached only with the capabilities: the ones without are skipped.
		return "bpf() refused although the capabilities are there: a seccomp profile (in a container: the runtime's default before containerd 1.7 / Docker 23, or CRI-O's) or a security module denies it; see deploy/README.md"
	}
	return "run `tracer check` as root; see README (Requirements)"
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
