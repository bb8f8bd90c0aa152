package collector

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/rlimit"
)

// Capabilities tracing needs or that its checks name: CAP_BPF and
// CAP_PERFMON load and attach the collectors (CAP_SYS_ADMIN covers both on
// any kernel, and perf-event uprobes need it since 6.16); CAP_SYS_PTRACE
// opens other users' /proc/PID/exe; CAP_SYSLOG shows kernel addresses;
// CAP_SYS_RESOURCE lifts RLIMIT_MEMLOCK before 5.11.
const (
	CapSysPtrace   = 19
	CapSysAdmin    = 21
	CapSysResource = 24
	CapSyslog      = 34
	CapPerfmon     = 38
	CapBPF         = 39
)

// ErrPrivileges is wrapped when the process may not load BPF programs.
var ErrPrivileges = errors.New("insufficient privileges")

// ErrNoBTF is wrapped when the kernel exposes no BTF, which CO-RE needs.
var ErrNoBTF = errors.New("kernel BTF not available")

// Preflight checks what loading needs before anything is loaded, so that the
// usual problems get a one-line answer instead of a verifier error.
func Preflight() error {
	caps, err := EffectiveCaps()
	if err == nil && !caps.CanLoad() {
		return fmt.Errorf("%w: need root, or CAP_BPF and CAP_PERFMON (e.g. sudo tracer ...)", ErrPrivileges)
	}
	if _, err := btf.LoadKernelSpec(); err != nil {
		return fmt.Errorf("%w: %v: the kernel needs CONFIG_DEBUG_INFO_BTF=y (/sys/kernel/btf/vmlinux)", ErrNoBTF, err)
	}
	return nil
}

// Setup is what every collector does before it loads: Preflight, then
// lifting RLIMIT_MEMLOCK (since 5.11 BPF memory is charged to the cgroup
// and the rlimit is moot, so failing to raise it is only logged).
func Setup(log *slog.Logger) error {
	if err := Preflight(); err != nil {
		return err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		log.Debug("could not raise RLIMIT_MEMLOCK", "err", err)
	}
	return nil
}

// Logger is log, or a logger that discards when log is nil: the default
// of every collector's Logger option.
func Logger(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// Caps is a set of capabilities (bit n: capability n).
type Caps uint64

// EffectiveCaps reads this process's effective capabilities.
func EffectiveCaps() (Caps, error) { return ProcessCaps(os.Getpid(), "CapEff") }

// ProcessCaps reads one capability set of process pid (set: CapEff,
// CapPrm, CapInh, CapBnd or CapAmb) from /proc/PID/status, which anyone
// may read.
func ProcessCaps(pid int, set string) (Caps, error) {
	v, err := StatusField(pid, set)
	if err != nil {
		return 0, err
	}
	c, err := strconv.ParseUint(v, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/status %s: %w", pid, set, err)
	}
	return Caps(c), nil
}

// StatusField returns the value of one field of /proc/PID/status ("Uid":
// "0\t0\t0\t0"), without its name and surrounding blanks.
func StatusField(pid int, field string) (string, error) {
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

// Has reports whether capability c is in the set.
func (caps Caps) Has(c uint) bool { return caps&(1<<c) != 0 }

// CanLoad reports whether the set may load and attach the collectors.
func (caps Caps) CanLoad() bool {
	return caps.Has(CapSysAdmin) || (caps.Has(CapBPF) && caps.Has(CapPerfmon))
}

// MissingToLoad names what the set lacks to load and attach the
// collectors ("CAP_PERFMON", or "CAP_BPF and CAP_PERFMON"); "" when it may.
func (caps Caps) MissingToLoad() string {
	if caps.CanLoad() {
		return ""
	}
	var missing []string
	for _, c := range []uint{CapBPF, CapPerfmon} {
		if !caps.Has(c) {
			missing = append(missing, CapName(c))
		}
	}
	return strings.Join(missing, " and ")
}

// Names spells the set, lowest capability first: ["CAP_CHOWN",
// "CAP_SYS_ADMIN", "capability 45"] (a number this list does not know).
func (caps Caps) Names() []string {
	var out []string
	for c := range uint(64) {
		if caps.Has(c) {
			out = append(out, CapName(c))
		}
	}
	return out
}

// CapName is the name of capability c: CapName(CapBPF) == "CAP_BPF".
func CapName(c uint) string {
	if c < uint(len(capNames)) {
		return "CAP_" + capNames[c]
	}
	return "capability " + strconv.Itoa(int(c))
}

// capNames are the capabilities of linux/capability.h, by number.
var capNames = []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK",
	"IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT",
	"SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL",
	"SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON",
	"BPF", "CHECKPOINT_RESTORE"}
