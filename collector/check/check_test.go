package check

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/collector/goprobe"
	"github.com/timeout-tracer/tracer/lab/testenv"
	"github.com/timeout-tracer/tracer/lab/testprog"
)

const (
	sysAdmin = collector.Caps(1 << collector.CapSysAdmin)
	bpf      = collector.Caps(1 << collector.CapBPF)
	perfmon  = collector.Caps(1 << collector.CapPerfmon)
	ptrace   = collector.Caps(1 << collector.CapSysPtrace)
)

// The check's advice names exactly what is missing.
func TestCheckAdvice(t *testing.T) {
	if got := capList(sysAdmin | bpf | 1<<45); got != "CAP_SYS_ADMIN, CAP_BPF, capability 45" {
		t.Errorf("capList = %q", got)
	}
	if got := capList(0x1f); got != "CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER and 1 more" {
		t.Errorf("capList of five = %q", got)
	}
	it := capabilityItem(bpf)
	if it.OK || !strings.Contains(it.Fix, "CAP_PERFMON (") || strings.Contains(it.Fix, "CAP_BPF (") {
		t.Errorf("with CAP_BPF only: %+v; want a failure naming CAP_PERFMON alone", it)
	}
	if it := capabilityItem(0); it.OK || !strings.Contains(it.Fix, "CAP_PERFMON (") || !strings.Contains(it.Fix, "CAP_BPF (") || it.Detail != "have none" {
		t.Errorf("without capabilities: %+v; want a failure naming both", it)
	}
	if it := capabilityItem(bpf | perfmon); !it.OK || it.Fix != "" {
		t.Errorf("CAP_BPF+CAP_PERFMON: %+v", it)
	}
	if it := capabilityItem(sysAdmin); !it.OK {
		t.Errorf("CAP_SYS_ADMIN: %+v", it)
	}
	eperm := fmt.Errorf("attach: %w", os.ErrPermission)
	if f := uprobeFix(eperm, false, bpf|perfmon); !strings.Contains(f, "grant CAP_SYS_ADMIN") {
		t.Errorf("perf-event uprobe refused: fix %q does not name CAP_SYS_ADMIN", f)
	}
	if f := uprobeFix(eperm, false, sysAdmin); strings.Contains(f, "grant") {
		t.Errorf("perf-event uprobe refused with CAP_SYS_ADMIN: fix %q asks to grant something", f)
	}
	if f := uprobeFix(fmt.Errorf("%w: not Go", goprobe.ErrNotTraceable), true, 0); strings.Contains(f, "CAP_") {
		t.Errorf("an untraceable process blamed on capabilities: %q", f)
	}
	if f := ptraceFix(os.Getpid(), 0, eperm); !strings.Contains(f, "CAP_SYS_PTRACE") {
		t.Errorf("ptraceFix = %q", f)
	}
	if f := ptraceFix(os.Getpid(), ptrace, eperm); !strings.Contains(f, "security module") {
		t.Errorf("ptraceFix with CAP_SYS_PTRACE = %q", f)
	}
	if f := ptraceFix(os.Getpid(), 0, fmt.Errorf("open: %w", os.ErrNotExist)); strings.Contains(f, "CAP_") {
		t.Errorf("a vanished process blamed on capabilities: %q", f)
	}
	if it := otherProcessesItem(0); !it.OK || !it.Warn || !strings.Contains(it.Fix, "CAP_SYS_PTRACE") {
		t.Errorf("other processes without CAP_SYS_PTRACE: %+v", it)
	}
	if it := otherProcessesItem(ptrace); !it.OK || it.Warn {
		t.Errorf("other processes with CAP_SYS_PTRACE: %+v", it)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_bpf_disabled"); err == nil && strings.TrimSpace(string(b)) != "0" {
		if it := unprivilegedBPFItem(0); it.OK || !strings.Contains(it.Fix, "CAP_BPF") {
			t.Errorf("unprivileged_bpf_disabled=%s without CAP_BPF: %+v", strings.TrimSpace(string(b)), it)
		}
	}
	if it := unprivilegedBPFItem(bpf); !it.OK {
		t.Errorf("with CAP_BPF: %+v", it)
	}
}

// A Go program that never sets a deadline links no timer context code: the
// check says it cannot be traced and why, not that it lacks capabilities.
func TestCheckNoDeadlineCode(t *testing.T) {
	f := uprobeFix(fmt.Errorf("%w: process 1 (x, go1.26): find deadline sites: look up context.(*timerCtx).cancel: not found", goprobe.ErrNotTraceable), true, 0)
	if !strings.Contains(f, "WithTimeout") || strings.Contains(f, "CAP_") {
		t.Errorf("fix = %q", f)
	}
}

// A process tracing cannot use is named with its reason, without any
// privileges: one that is not Go, one that does not exist; and the
// check's own process opens and is Go.
func TestCheckProcess(t *testing.T) {
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Skipf("no sleep to check: %v", err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	items := process(sleep.Process.Pid, 0, false)
	if it := find(t, items, "go binary"); it.OK || !strings.Contains(it.Fix, "only Go programs") {
		t.Errorf("sleep: %+v", it)
	}
	if it := find(t, items, fmt.Sprintf("process %d", sleep.Process.Pid)); !it.OK {
		t.Errorf("sleep, a process of this uid: %+v", it)
	}

	// The highest PID is never handed out.
	max, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	gone := strings.TrimSpace(string(max))
	items = process(atoi(t, gone), 0, false)
	if len(items) != 1 || items[0].OK || !strings.Contains(items[0].Fix, "no such process") {
		t.Errorf("PID %s: %+v", gone, items)
	}

	items = process(0, 0, false)
	if it := find(t, items, fmt.Sprintf("process %d (this tracer)", os.Getpid())); !it.OK {
		t.Errorf("own process: %+v", it)
	}
	if it := find(t, items, "go binary"); !it.OK {
		t.Errorf("own process: %+v", it)
	}
	if it := find(t, items, "go probes"); !it.Skip || it.Detail != noCaps {
		t.Errorf("go probes without capabilities: %+v; want skipped", it)
	}
}

// As root the whole check passes, attaching the deadline probes to the
// check's own process and to another Go program; nothing is skipped.
func TestCheckRunAsRoot(t *testing.T) {
	testenv.Root(t)
	if err := collector.Preflight(); err != nil {
		t.Skipf("kernel tracing unavailable: %v", err)
	}
	// The deadline (context.WithTimeout) links the timer context code into
	// this test binary: a Go program without it has nothing to probe.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tgt := exec.CommandContext(ctx, testprog.Path(t, "deadlines"), "-rounds", "1")
	stdin, _ := tgt.StdinPipe() // it waits on stdin
	if err := tgt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); tgt.Process.Kill(); tgt.Wait() })

	for _, pid := range []int{0, tgt.Process.Pid} {
		r := Run(Config{PID: pid})
		for _, it := range r.Items {
			if !it.OK || it.Skip {
				t.Errorf("pid %d: %+v", pid, it)
			}
		}
		if !r.OK || len(r.Hooks) == 0 {
			t.Errorf("pid %d: OK %v, %d hooks", pid, r.OK, len(r.Hooks))
		}
		if it := find(t, r.Items, "go probes"); !strings.Contains(it.Detail, "attached the deadline probes") {
			t.Errorf("pid %d: %+v", pid, it)
		}
	}
}

func find(t *testing.T, items []Item, name string) Item {
	t.Helper()
	for _, it := range items {
		if it.Name == name {
			return it
		}
	}
	t.Fatalf("no %q item in %+v", name, items)
	return Item{}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}
