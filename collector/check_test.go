package collector

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// The check's advice names exactly what is missing.
func TestCheckAdvice(t *testing.T) {
	if got := capNames(1<<capSysAdmin | 1<<capBPF | 1<<45); got != "CAP_SYS_ADMIN, CAP_BPF, capability 45" {
		t.Errorf("capNames = %q", got)
	}
	it := capabilityItem(1 << capBPF)
	if it.OK || !strings.Contains(it.Fix, "CAP_PERFMON (") || strings.Contains(it.Fix, "CAP_BPF (") {
		t.Errorf("with CAP_BPF only: %+v; want a failure naming CAP_PERFMON alone", it)
	}
	if it := capabilityItem(1<<capBPF | 1<<capPerfmon); !it.OK {
		t.Errorf("CAP_BPF+CAP_PERFMON: %+v", it)
	}
	if it := capabilityItem(1 << capSysAdmin); !it.OK {
		t.Errorf("CAP_SYS_ADMIN: %+v", it)
	}
	eperm := fmt.Errorf("attach: %w", os.ErrPermission)
	if f := uprobeFix(eperm, false, 1<<capBPF|1<<capPerfmon); !strings.Contains(f, "CAP_SYS_ADMIN") {
		t.Errorf("perf-event uprobe refused: fix %q does not name CAP_SYS_ADMIN", f)
	}
	if f := uprobeFix(fmt.Errorf("%w: not Go", ErrNotTraceable), true, 0); strings.Contains(f, "CAP_") {
		t.Errorf("an untraceable process blamed on capabilities: %q", f)
	}
	if f := ptraceFix(os.Getpid(), 0, eperm); !strings.Contains(f, "CAP_SYS_PTRACE") {
		t.Errorf("ptraceFix = %q", f)
	}
	if f := ptraceFix(os.Getpid(), 1<<capSysPtrace, eperm); !strings.Contains(f, "security module") {
		t.Errorf("ptraceFix with CAP_SYS_PTRACE = %q", f)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_bpf_disabled"); err == nil && strings.TrimSpace(string(b)) != "0" {
		if it := unprivilegedBPFItem(0); it.OK || !strings.Contains(it.Fix, "CAP_BPF") {
			t.Errorf("unprivileged_bpf_disabled=%s without CAP_BPF: %+v", strings.TrimSpace(string(b)), it)
		}
	}
	if it := unprivilegedBPFItem(1 << capBPF); !it.OK {
		t.Errorf("with CAP_BPF: %+v", it)
	}
}
