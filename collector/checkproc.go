package collector

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/timeout-tracer/tracer/gobin"
)

// checkProcess opens the /proc entries tracing reads of process pid (0:
// this one), analyses its executable and attaches the Go deadline probes
// to it, as `tracer trace --pid` does; each failure names what is missing.
func checkProcess(pid int, caps uint64, loadable bool) []CheckItem {
	self := pid == 0
	if self {
		pid = os.Getpid()
	}
	var items []CheckItem
	name := fmt.Sprintf("process %d", pid)
	if self {
		name = fmt.Sprintf("process %d (this tracer)", pid)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return []CheckItem{{Name: name, Detail: err.Error(), Fix: "no such process here: a PID of this PID namespace (in a pod: hostPID)"}}
	}
	procErr := openProc(pid)
	if procErr != nil {
		items = append(items, CheckItem{Name: name, Detail: procErr.Error(), Fix: ptraceFix(pid, caps, procErr)})
	} else {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		items = append(items, CheckItem{Name: name, OK: true, Detail: fmt.Sprintf("opened /proc/%d/exe (%s), maps and root", pid, exe)})
	}
	if self {
		items = append(items, otherProcessesItem(caps))
	}
	if procErr != nil {
		return append(items, CheckItem{Name: "go probes", Skip: true, Detail: "not checked: the process's /proc entries cannot be read"})
	}
	bin, err := gobin.OpenPID(pid)
	if err != nil {
		return append(items, CheckItem{Name: "go binary", Detail: err.Error(), Fix: "only Go programs (Go 1.17+) can be traced"})
	}
	items = append(items, CheckItem{Name: "go binary", OK: true, Detail: bin.GoVersion + " " + bin.ExePath})
	bin.Close()
	if !loadable {
		return append(items, CheckItem{Name: "go probes", Skip: true, Detail: "not checked: loading BPF needs the capabilities above"})
	}
	multi := useUprobeMulti()
	how := "perf-event uprobes"
	if multi {
		how = "uprobe_multi links"
	}
	p, err := StartGo(GoConfig{PID: pid, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return append(items, CheckItem{Name: "go probes", Detail: err.Error(), Fix: uprobeFix(err, multi, caps)})
	}
	n := len(p.cold)
	if err := p.Close(); err != nil {
		return append(items, CheckItem{Name: "go probes", Detail: "detach: " + err.Error(), Fix: "report a bug"})
	}
	return append(items, CheckItem{Name: "go probes", OK: true,
		Detail: fmt.Sprintf("attached the deadline probes (%d uprobes) as %s, then detached", n, how)})
}

// openProc opens what tracing reads of a process: its executable (the
// ELF is analysed), its memory map (load bias) and its root (the
// executable's path inside its mount namespace).
func openProc(pid int) error {
	var errs []error
	for _, e := range []string{"exe", "maps"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/%s", pid, e))
		if err == nil {
			_, err = f.Read(make([]byte, 4))
			if err == io.EOF {
				err = nil
			}
			f.Close()
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid)); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	// One line: the check prints a table.
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return fmt.Errorf("%w", &procError{errs: errs, msg: strings.Join(msgs, "; ")})
}

// procError joins the refusals of several /proc entries on one line and
// still matches each with errors.Is.
type procError struct {
	errs []error
	msg  string
}

func (e *procError) Error() string   { return e.msg }
func (e *procError) Unwrap() []error { return e.errs }

// ptraceFix explains a refused /proc/PID entry with the kernel's ptrace
// read check: another user's process, or one holding capabilities the
// tracer lacks, needs CAP_SYS_PTRACE.
func ptraceFix(pid int, caps uint64, err error) string {
	if !errors.Is(err, os.ErrPermission) {
		return "the process may have exited; else report a bug"
	}
	if hasCap(caps, capSysPtrace) {
		return "refused although CAP_SYS_PTRACE is held: a security module denies ptrace reads (a container's default AppArmor profile allows them only within the container: deploy/README.md, appArmorProfile), or the process is in another user namespace"
	}
	const need = ": the kernel's ptrace read check then needs CAP_SYS_PTRACE (grant it; the DaemonSet does)"
	uids, _ := statusField(pid, "Uid")
	euid := strconv.Itoa(os.Geteuid())
	for _, u := range strings.Fields(uids) {
		if u != euid {
			return fmt.Sprintf("process %d runs as uid %s, this tracer as uid %s%s", pid, strings.Join(strings.Fields(uids), "/"), euid, need)
		}
	}
	if prm, err := statusCaps(pid, "CapPrm"); err == nil && prm&^caps != 0 {
		return fmt.Sprintf("process %d holds capabilities this tracer lacks (%s)%s", pid, capNames(prm&^caps), need)
	}
	return fmt.Sprintf("process %d is not dumpable (set-user-ID, or prctl PR_SET_DUMPABLE 0)%s", pid, need)
}

// otherProcessesItem warns, when the tracer checks only itself, that other
// users' processes and root's need CAP_SYS_PTRACE.
func otherProcessesItem(caps uint64) CheckItem {
	if hasCap(caps, capSysPtrace) {
		return CheckItem{Name: "other processes", OK: true, Detail: "CAP_SYS_PTRACE: every process's /proc/PID/exe is readable (unless a security module denies it)"}
	}
	return CheckItem{Name: "other processes", OK: true, Warn: true,
		Detail: fmt.Sprintf("no CAP_SYS_PTRACE: only processes of uid %d holding no capability beyond this tracer's can be traced", os.Geteuid()),
		Fix:    "grant CAP_SYS_PTRACE to trace other users' processes and root's (the DaemonSet does); `tracer check --pid N` checks one"}
}

// uprobeFix explains a failed uprobe attach.
func uprobeFix(err error, multi bool, caps uint64) string {
	switch {
	case errors.Is(err, ErrNotTraceable):
		return "this process cannot be traced (see above)"
	case errors.Is(err, os.ErrPermission) && !multi && !hasCap(caps, capSysAdmin):
		return "no uprobe_multi links here (Linux before 6.6, or TT_UPROBE=perf), and perf-event uprobes need CAP_SYS_ADMIN on kernels with the 2025 change \"perf/core: Require CAP_SYS_ADMIN for uprobes\" (6.16 and the stable kernels it went to): grant CAP_SYS_ADMIN, or use Linux 6.6+"
	case errors.Is(err, os.ErrPermission) && !multi:
		return "perf-event uprobe refused despite CAP_SYS_ADMIN: check kernel.perf_event_paranoid and the security modules"
	}
	return fixFor(err)
}

// capNames spells a capability set: "CAP_NET_ADMIN, CAP_SYS_ADMIN, ...".
func capNames(set uint64) string {
	names := []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
		"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK",
		"IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT",
		"SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL",
		"SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON",
		"BPF", "CHECKPOINT_RESTORE"}
	var out []string
	for i := range 64 {
		if set&(1<<i) == 0 {
			continue
		}
		if i < len(names) {
			out = append(out, "CAP_"+names[i])
		} else {
			out = append(out, "capability "+strconv.Itoa(i))
		}
	}
	if len(out) > 4 {
		return strings.Join(out[:4], ", ") + fmt.Sprintf(" and %d more", len(out)-4)
	}
	return strings.Join(out, ", ")
}
