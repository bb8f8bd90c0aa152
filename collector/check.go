package collector

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
)

// Capabilities the collector needs (CAP_SYS_ADMIN covers both on any kernel).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// ErrPrivileges is wrapped when the process may not load BPF programs.
var ErrPrivileges = errors.New("insufficient privileges")

// ErrNoBTF is wrapped when the kernel exposes no BTF, which CO-RE needs.
var ErrNoBTF = errors.New("kernel BTF not available")

// Preflight checks what loading needs before anything is loaded, so that the
// usual problems get a one-line answer instead of a verifier error.
func Preflight() error {
	caps, err := effectiveCaps()
	if err == nil && !hasCap(caps, capSysAdmin) && !(hasCap(caps, capBPF) && hasCap(caps, capPerfmon)) {
		return fmt.Errorf("%w: need root, or CAP_BPF and CAP_PERFMON (e.g. sudo tracer ...)", ErrPrivileges)
	}
	if _, err := btf.LoadKernelSpec(); err != nil {
		return fmt.Errorf("%w: %v: the kernel needs CONFIG_DEBUG_INFO_BTF=y (/sys/kernel/btf/vmlinux)", ErrNoBTF, err)
	}
	return nil
}

func effectiveCaps() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

func hasCap(caps uint64, c uint) bool { return caps&(1<<c) != 0 }

// CheckItem is one line of `tracer check`.
type CheckItem struct {
	Name   string
	OK     bool
	Detail string
	Fix    string // what to do when !OK
}

// CheckReport is the answer to "can this machine trace?".
type CheckReport struct {
	Items []CheckItem
	Hooks []HookStatus
	OK    bool // tracing works: every required piece loaded and attached
}

// Check probes the kernel and really loads and attaches the TCP collector
// (then detaches it): the only honest test that tracing works.
func Check() CheckReport {
	var r CheckReport
	add := func(it CheckItem) { r.Items = append(r.Items, it) }

	add(CheckItem{Name: "kernel", OK: true, Detail: kernelRelease() + " " + runtime.GOARCH})

	caps, err := effectiveCaps()
	switch {
	case err != nil:
		add(CheckItem{Name: "capabilities", OK: false, Detail: err.Error(), Fix: "run on Linux with /proc mounted"})
	default:
		var have []string
		for _, c := range []struct {
			n   string
			bit uint
		}{{"CAP_SYS_ADMIN", capSysAdmin}, {"CAP_BPF", capBPF}, {"CAP_PERFMON", capPerfmon}} {
			if hasCap(caps, c.bit) {
				have = append(have, c.n)
			}
		}
		ok := hasCap(caps, capSysAdmin) || (hasCap(caps, capBPF) && hasCap(caps, capPerfmon))
		add(CheckItem{Name: "capabilities", OK: ok, Detail: "have " + orNone(have),
			Fix: "run as root, or grant CAP_BPF and CAP_PERFMON (CAP_SYS_RESOURCE too on kernels before 5.11)"})
	}

	if _, err := btf.LoadKernelSpec(); err != nil {
		add(CheckItem{Name: "btf", OK: false, Detail: err.Error(), Fix: "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"})
	} else {
		add(CheckItem{Name: "btf", OK: true, Detail: "/sys/kernel/btf/vmlinux"})
	}

	if err := features.HaveMapType(ebpf.RingBuf); err != nil {
		add(CheckItem{Name: "ring buffer", OK: false, Detail: err.Error(), Fix: "BPF ring buffers need Linux 5.8 or later"})
	} else {
		add(CheckItem{Name: "ring buffer", OK: true, Detail: "BPF_MAP_TYPE_RINGBUF"})
	}

	if hz, err := kernelHZ(); err != nil {
		add(CheckItem{Name: "HZ", OK: true, Detail: "unknown (" + err.Error() + "): RTOs assume 250"})
	} else {
		add(CheckItem{Name: "HZ", OK: true, Detail: strconv.Itoa(int(hz))})
	}

	if addr, _ := kallsymsAddr("tcp_write_timer"); addr == 0 {
		add(CheckItem{Name: "kallsyms", OK: true, Detail: "tcp_write_timer not visible: no zero-window events",
			Fix: "run as root with kernel.kptr_restrict<=1"})
	} else {
		add(CheckItem{Name: "kallsyms", OK: true, Detail: "tcp_write_timer found: zero-window events on"})
	}

	if _, err := os.Stat("/sys/kernel/tracing/events"); err != nil {
		add(CheckItem{Name: "tracefs", OK: true, Detail: "not mounted (not needed: tp_btf and raw_tp attach without it)"})
	} else {
		add(CheckItem{Name: "tracefs", OK: true, Detail: "mounted (not needed by the collector)"})
	}

	c, err := StartTCP(Config{RingBufferBytes: 64 * 1024})
	if err != nil {
		add(CheckItem{Name: "tcp collector", OK: false, Detail: err.Error(), Fix: fixFor(err)})
	} else {
		r.Hooks = c.Hooks()
		n := 0
		for _, h := range r.Hooks {
			if h.Type != "" {
				n++
			}
		}
		add(CheckItem{Name: "tcp collector", OK: true, Detail: fmt.Sprintf("loaded and attached %d of %d tracepoints", n, len(r.Hooks))})
		if err := c.Close(); err != nil {
			add(CheckItem{Name: "detach", OK: false, Detail: err.Error(), Fix: "report a bug"})
		}
	}

	// Optional: never makes the check fail.
	if e, err := StartEnrich(EnrichConfig{}); err != nil {
		add(CheckItem{Name: "enrichment", OK: true, Detail: "not available (optional; tail loss probes come from the tracepoints): " + err.Error()})
	} else {
		add(CheckItem{Name: "enrichment", OK: true, Detail: "tcp_send_loss_probe attached via " + e.Via() + " (optional: every tail loss probe the kernel sends)"})
		if err := e.Close(); err != nil {
			add(CheckItem{Name: "detach enrichment", OK: false, Detail: err.Error(), Fix: "report a bug"})
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
	case errors.Is(err, ErrPrivileges):
		return "run as root, or grant CAP_BPF and CAP_PERFMON"
	case errors.Is(err, ErrNoBTF):
		return "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"
	case errors.Is(err, ErrRequiredHook):
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
