// Package workload says who a process is: its executable (path, name and
// the (device, inode) the daemon attaches uprobes to once), its cgroups, and
// from them the container and Kubernetes pod it runs in; and it decides,
// with a Filter, whether the node agent should trace it.
//
// It reads only /proc (under a configurable root) and, for CgroupDir, the
// cgroup filesystem. It must not import cilium/ebpf or talk to the
// Kubernetes API: pod names come from package kube, through the caller.
package workload

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrGone is wrapped by Identify when the process no longer exists (it
// exited between being listed and being read). It matches os.ErrNotExist
// too: errors.Is(err, ErrGone) and errors.Is(err, os.ErrNotExist) both hold.
var ErrGone = fmt.Errorf("process gone: %w", os.ErrNotExist)

// ErrNoExecutable is wrapped by Identify for a live process that has no
// executable: a kernel thread, or a zombie that has not been reaped yet.
var ErrNoExecutable = errors.New("process has no executable (kernel thread or zombie)")

// FileID names a file by device and inode. Two processes with the same
// FileID run the same executable file, so the daemon attaches its uprobes
// once per FileID. Same fields as gobin.FileID: convert with
// gobin.FileID(id.File).
//
// On overlayfs (container images) every container's root is a mount of its
// own with its own device number: the same image file run in two containers
// has two FileIDs, with the same inode number and different devices
// (measured on Linux 6.18; /proc/PID/maps shows the overlay device too). So
// a FileID never merges two different files, but it does not merge the
// replicas of one image either, while the kernel's uprobe is one per real
// (lower) inode: probes attached once per FileID must filter their events
// by process, or the same hit is reported once per attachment.
type FileID struct {
	Dev uint64
	Ino uint64
}

// Identity is what one process is. Namespace and Pod are not read from the
// process: the caller fills them from the Kubernetes API (package kube) by
// PodUID, and Filter.Match uses them when set.
type Identity struct {
	PID int
	// Exe is the executable's path as the kernel names it, in the
	// process's own mount namespace, without the " (deleted)" suffix.
	Exe string
	// ExeDeleted: the file was deleted or replaced after the process
	// started (an upgrade in place). /proc/PID/exe still reaches it.
	ExeDeleted bool
	// ExeName is the base name of Exe; Comm is the kernel's task name
	// (at most 15 bytes, and a process may change it).
	ExeName string
	Comm    string
	// File is the (device, inode) of the running executable, from
	// stat(/proc/PID/exe): valid even when the file was deleted.
	File FileID
	// Cgroup is the cgroup v2 path (the "0::" line), as this reader's
	// cgroup namespace shows it: it starts with "/.." when the process is
	// outside the reader's namespace root. Empty when the process has no
	// v2 line.
	Cgroup string
	// CgroupV1 is the path in the cgroup v1 hierarchy of the cpu
	// controller (else memory, else pids). Empty on a pure v2 host.
	CgroupV1 string
	Container
	// Namespace and Pod are the Kubernetes names of PodUID, filled by the
	// caller; empty when unknown.
	Namespace string
	Pod       string
	// App is the pod's application name, from its labels
	// app.kubernetes.io/name, else app (PodApp); empty when unknown.
	App string
	// Service is what the process names itself in its OpenTelemetry
	// environment, filled by the caller with ReadService when it attaches
	// (Identify does not read the environment of every process it looks
	// at).
	Service Service
}

// Identify reads who process pid is from procRoot (normally "/proc"; in the
// DaemonSet with hostPID, also "/proc"). Errors wrap ErrGone when the
// process exited, ErrNoExecutable for kernel threads and zombies, and
// os.ErrPermission (with the capability to grant) when the caller may not
// read the process's executable.
func Identify(procRoot string, pid int) (Identity, error) {
	if pid <= 0 {
		return Identity{}, fmt.Errorf("identify process %d: not a process id (must be positive)", pid)
	}
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	id := Identity{PID: pid}

	comm, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil {
		return id, procError(pid, "read comm", err)
	}
	id.Comm = strings.TrimSuffix(string(comm), "\n")

	cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		return id, procError(pid, "read cgroup", err)
	}
	cgs, err := ParseCgroupFile(string(cg))
	if err != nil {
		return id, fmt.Errorf("identify process %d: %s/cgroup: %w", pid, dir, err)
	}
	id.Cgroup, id.CgroupV1 = cgs.V2, cgs.V1Path()
	id.Container = cgs.Container()

	exeLink := filepath.Join(dir, "exe")
	target, err := os.Readlink(exeLink)
	if err != nil {
		return id, exeError(dir, pid, "read the link", err)
	}
	if t, ok := strings.CutSuffix(target, " (deleted)"); ok {
		target, id.ExeDeleted = t, true
	}
	id.Exe, id.ExeName = target, filepath.Base(target)
	st, err := os.Stat(exeLink)
	if err != nil {
		return id, exeError(dir, pid, "stat", err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return id, fmt.Errorf("identify process %d: stat %s gave no device and inode", pid, exeLink)
	}
	id.File = FileID{Dev: uint64(sys.Dev), Ino: sys.Ino}
	return id, nil
}

// exeError classifies a failure on /proc/PID/exe: the process is gone, is a
// kernel thread or zombie (the link has no target but the process is there),
// or the caller lacks the right to look at it.
func exeError(dir string, pid int, op string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := os.Stat(dir); serr != nil {
			return fmt.Errorf("identify process %d: %w", pid, ErrGone)
		}
		return fmt.Errorf("identify process %d: %s %s/exe: %w", pid, op, dir, ErrNoExecutable)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("identify process %d: %s %s/exe: %w: reading the executable of another user's process, of one holding capabilities this process lacks, or of a non-dumpable one needs CAP_SYS_PTRACE; grant it, or exclude the process", pid, op, dir, err)
	}
	return fmt.Errorf("identify process %d: %s %s/exe: %w", pid, op, dir, err)
}

// procError classifies a failure on a world-readable file of /proc/PID.
func procError(pid int, op string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("identify process %d: %w", pid, ErrGone)
	}
	return fmt.Errorf("identify process %d: %s: %w", pid, op, err)
}

// PodApp is the application name a pod's labels give: the recommended
// app.kubernetes.io/name, else the older app; "" when neither is set.
func PodApp(labels map[string]string) string {
	if v := labels["app.kubernetes.io/name"]; v != "" {
		return v
	}
	return labels["app"]
}
