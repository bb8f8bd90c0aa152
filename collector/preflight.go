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

// Capabilities the collectors need (CAP_SYS_ADMIN covers both on any kernel).
const (
	CapSysAdmin = 21
	CapPerfmon  = 38
	CapBPF      = 39
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

// Caps is a set of effective capabilities (bit n: capability n).
type Caps uint64

// EffectiveCaps reads this process's effective capabilities.
func EffectiveCaps() (Caps, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			c, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return Caps(c), err
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

// Has reports whether capability c is in the set.
func (caps Caps) Has(c uint) bool { return caps&(1<<c) != 0 }

// CanLoad reports whether the set may load and attach the collectors.
func (caps Caps) CanLoad() bool {
	return caps.Has(CapSysAdmin) || (caps.Has(CapBPF) && caps.Has(CapPerfmon))
}
