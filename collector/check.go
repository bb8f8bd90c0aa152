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

// Capabilities the collector needs (CAP_SYS_ADMIN covers BPF and PERFMON
// on any kernel).
const (
	capSysPtrace   = 19
	capSysAdmin    = 21
	capSysResource = 24
	capPerfmon     = 38
	capBPF         = 39
)

// ErrPrivileges is wrapped when the process may not load BPF programs.
var ErrPrivileges = errors.New("insufficient privileges")

// ErrNoBTF is wrapped when the kernel exposes no BTF, which CO-RE needs.
var ErrNoBTF = errors.New("kernel BTF not available")

// Preflight checks what loading needs before anything is loaded, so that the
// usual problems get a one-line answer instead of a verifier error.
func Preflight() error {
	caps, err := effectiveCaps()
	if err == nil && !canLoad(caps) {
		return fmt.Errorf("%w: need root, or CAP_BPF and CAP_PERFMON (e.g. sudo tracer ...)", ErrPrivileges)
	}
	if _, err := btf.LoadKernelSpec(); err != nil {
		return fmt.Errorf("%w: %v: the kernel needs CONFIG_DEBUG_INFO_BTF=y (/sys/kernel/btf/vmlinux)", ErrNoBTF, err)
	}
	return nil
}

func effectiveCaps() (uint64, error) { return statusCaps(os.Getpid(), "CapEff") }

// statusCaps reads a capability set (CapEff, CapPrm, ...) of a process
// from /proc/PID/status, which anyone may read.
func statusCaps(pid int, field string) (uint64, error) {
	v, err := statusField(pid, field)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(v, 16, 64)
}

func statusField(pid int, field string) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func hasCap(caps uint64, c uint) bool { return caps&(1<<c) != 0 }

// canLoad: the capabilities to load and attach tracing programs.
func canLoad(caps uint64) bool {
	return hasCap(caps, capSysAdmin) || (hasCap(caps, capBPF) && hasCap(caps, capPerfmon))
}

// CheckItem is one line of `tracer check`.
type CheckItem struct {
	Name   string
	OK     bool
	Warn   bool // OK, but something a user may need is missing (Fix says what)
	Skip   bool // not checked: an earlier failure makes it moot (Detail says which)
	Detail string
	Fix    string // what to do when !OK or Warn
}

// CheckReport is the answer to "can this machine trace?".
type CheckReport struct {
	Items []CheckItem
	Hooks []HookStatus
	OK    bool // tracing works: every required piece loaded and attached
}

// CheckConfig says what to check besides the kernel.
type CheckConfig struct {
	// PID is the process whose tracing to check: its /proc entries are
	// opened, its executable analysed and the deadline probes really
	// attached to it, as `tracer trace --pid` would. 0: the tracer's own
	// process (a Go program too), which needs no ptrace access.
	PID int
}

// Check probes the kernel, really loads and attaches the TCP collector,
// and really attaches the Go probes (uprobes) to a process, then detaches
// everything: the only honest test that tracing works. Each failure names
// the capability or setting it lacks; a probe that could not run for lack
// of privileges is skipped, never blamed on the kernel.
func Check(cfg CheckConfig) CheckReport {
	var r CheckReport
	add := func(it CheckItem) { r.Items = append(r.Items, it) }

	add(CheckItem{Name: "kernel", OK: true, Detail: kernelRelease() + " " + runtime.GOARCH})

	caps, err := effectiveCaps()
	if err != nil {
		add(CheckItem{Name: "capabilities", Detail: err.Error(), Fix: "run on Linux with /proc mounted"})
	} else {
		add(capabilityItem(caps))
	}
	loadable := err == nil && canLoad(caps)
	add(unprivilegedBPFItem(caps))

	if _, err := btf.LoadKernelSpec(); err != nil {
		add(CheckItem{Name: "btf", Detail: err.Error(), Fix: "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"})
	} else {
		add(CheckItem{Name: "btf", OK: true, Detail: "/sys/kernel/btf/vmlinux"})
	}

	const noCaps = "not checked: loading BPF needs the capabilities above"
	switch err := features.HaveMapType(ebpf.RingBuf); {
	case !loadable:
		add(CheckItem{Name: "ring buffer", Skip: true, Detail: noCaps})
	case err == nil:
		add(CheckItem{Name: "ring buffer", OK: true, Detail: "BPF_MAP_TYPE_RINGBUF"})
	case errors.Is(err, ebpf.ErrNotSupported):
		add(CheckItem{Name: "ring buffer", Detail: err.Error(), Fix: "BPF ring buffers need Linux 5.8 or later"})
	default:
		add(CheckItem{Name: "ring buffer", Detail: err.Error(), Fix: fixFor(err)})
	}

	if hz, err := kernelHZ(); err != nil {
		add(CheckItem{Name: "HZ", OK: true, Detail: "unknown (" + err.Error() + "): RTOs assume 250"})
	} else {
		add(CheckItem{Name: "HZ", OK: true, Detail: strconv.Itoa(int(hz))})
	}

	if addr, _ := kallsymsAddr("tcp_write_timer"); addr == 0 {
		add(CheckItem{Name: "kallsyms", OK: true, Warn: true, Detail: "tcp_write_timer not visible: no zero-window events",
			Fix: "grant CAP_SYSLOG, or run as root with kernel.kptr_restrict<=1"})
	} else {
		add(CheckItem{Name: "kallsyms", OK: true, Detail: "tcp_write_timer found: zero-window events on"})
	}

	if _, err := os.Stat("/sys/kernel/tracing/events"); err != nil {
		add(CheckItem{Name: "tracefs", OK: true, Detail: "not mounted (not needed: tp_btf and raw_tp attach without it)"})
	} else {
		add(CheckItem{Name: "tracefs", OK: true, Detail: "mounted (not needed by the collector)"})
	}

	if !loadable {
		add(CheckItem{Name: "tcp collector", Skip: true, Detail: noCaps})
	} else if c, err := StartTCP(Config{RingBufferBytes: 64 * 1024}); err != nil {
		add(CheckItem{Name: "tcp collector", Detail: err.Error(), Fix: fixFor(err)})
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
			add(CheckItem{Name: "detach", Detail: err.Error(), Fix: "report a bug"})
		}
	}

	// Optional: never makes the check fail.
	if !loadable {
		add(CheckItem{Name: "enrichment", OK: true, Skip: true, Detail: noCaps + " (optional)"})
	} else if e, err := StartEnrich(EnrichConfig{}); err != nil {
		add(CheckItem{Name: "enrichment", OK: true, Detail: "not available (optional; tail loss probes come from the tracepoints): " + err.Error()})
	} else {
		add(CheckItem{Name: "enrichment", OK: true, Detail: "tcp_send_loss_probe attached via " + e.Via() + " (optional: every tail loss probe the kernel sends)"})
		if err := e.Close(); err != nil {
			add(CheckItem{Name: "detach enrichment", Detail: err.Error(), Fix: "report a bug"})
		}
	}

	for _, it := range checkProcess(cfg.PID, caps, loadable) {
		add(it)
	}

	r.OK = true
	for _, it := range r.Items {
		r.OK = r.OK && it.OK
	}
	return r
}

// capabilityItem names what the process has and, when it cannot load BPF,
// exactly which capabilities it lacks.
func capabilityItem(caps uint64) CheckItem {
	var have, missing []string
	for _, c := range []struct {
		n   string
		bit uint
	}{{"CAP_SYS_ADMIN", capSysAdmin}, {"CAP_BPF", capBPF}, {"CAP_PERFMON", capPerfmon}, {"CAP_SYS_PTRACE", capSysPtrace}, {"CAP_SYS_RESOURCE", capSysResource}} {
		if hasCap(caps, c.bit) {
			have = append(have, c.n)
		}
	}
	it := CheckItem{Name: "capabilities", OK: canLoad(caps), Detail: "have " + orNone(have)}
	if !it.OK {
		if !hasCap(caps, capBPF) {
			missing = append(missing, "CAP_BPF (the bpf() syscall: maps, ring buffers, programs)")
		}
		if !hasCap(caps, capPerfmon) {
			missing = append(missing, "CAP_PERFMON (tracing programs and their links)")
		}
		it.Fix = "run as root, or grant " + strings.Join(missing, " and ") + "; CAP_SYS_RESOURCE too on kernels before 5.11"
	}
	return it
}

// unprivilegedBPFItem reports kernel.unprivileged_bpf_disabled: without
// CAP_BPF (or CAP_SYS_ADMIN) bpf() is refused outright when it is set,
// whatever else the process may do.
func unprivilegedBPFItem(caps uint64) CheckItem {
	it := CheckItem{Name: "unprivileged bpf", OK: true}
	b, err := os.ReadFile("/proc/sys/kernel/unprivileged_bpf_disabled")
	if err != nil {
		it.Detail = "kernel.unprivileged_bpf_disabled unreadable: " + err.Error()
		return it
	}
	v := strings.TrimSpace(string(b))
	privileged := hasCap(caps, capBPF) || hasCap(caps, capSysAdmin)
	switch {
	case privileged:
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

func fixFor(err error) string {
	switch {
	case errors.Is(err, ErrPrivileges):
		return "run as root, or grant CAP_BPF and CAP_PERFMON"
	case errors.Is(err, ErrNoBTF):
		return "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"
	case errors.Is(err, ErrRequiredHook):
		return "this kernel lacks a required tracepoint (Linux 5.15 or later is supported)"
	case errors.Is(err, os.ErrPermission):
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
