package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/timeout-tracer/tracer/deploy"
	"github.com/timeout-tracer/tracer/lab/testenv"
)

// Live tests: real processes of this machine, read through the real /proc.

// startSleep runs "sleep" (or the given binary) as a child and kills it at
// the end of the test.
func startSleep(t *testing.T, bin string, attr *syscall.SysProcAttr) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "600")
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func fileIDOf(t *testing.T, p string) FileID {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	s := st.Sys().(*syscall.Stat_t)
	return FileID{Dev: uint64(s.Dev), Ino: s.Ino}
}

func sleepPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sleep")
	if err != nil {
		t.Skipf("no sleep command: %v", err)
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestIdentifyLiveProcess(t *testing.T) {
	bin := sleepPath(t)
	cmd := startSleep(t, bin, nil)
	id, err := Identify("/proc", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	own, err := ParseCgroupFile(string(self))
	if err != nil {
		t.Fatal(err)
	}
	if id.Exe != bin || id.ExeName != filepath.Base(bin) || id.Comm != "sleep" || id.ExeDeleted {
		t.Errorf("exe %q name %q comm %q deleted %v, want %q", id.Exe, id.ExeName, id.Comm, id.ExeDeleted, bin)
	}
	if want := fileIDOf(t, bin); id.File != want {
		t.Errorf("file %+v, want %+v", id.File, want)
	}
	// A child starts in its parent's cgroups.
	if id.Cgroup != own.V2 || id.CgroupV1 != own.V1Path() {
		t.Errorf("cgroups %q / %q, want the parent's %q / %q", id.Cgroup, id.CgroupV1, own.V2, own.V1Path())
	}

	cmd.Process.Kill()
	cmd.Wait()
	_, err = Identify("/proc", cmd.Process.Pid)
	if !errors.Is(err, ErrGone) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after exit: %v, want ErrGone (and os.ErrNotExist)", err)
	}
}

// An executable replaced while it runs (an upgrade in place) is still
// identified, by the inode the process runs.
func TestIdentifyDeletedExecutable(t *testing.T) {
	src := sleepPath(t)
	bin := filepath.Join(t.TempDir(), "upgraded-sleep")
	testenv.CopyFile(t, src, bin, 0o755)
	want := fileIDOf(t, bin)
	cmd := startSleep(t, bin, nil)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	id, err := Identify("/proc", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !id.ExeDeleted || id.Exe != bin || id.ExeName != "upgraded-sleep" || id.File != want {
		t.Errorf("got %+v, want deleted %s with file %+v", id, bin, want)
	}
}

func TestIdentifyKernelThread(t *testing.T) {
	comm, err := os.ReadFile("/proc/2/comm")
	if err != nil || strings.TrimSpace(string(comm)) != "kthreadd" {
		t.Skipf("pid 2 is not kthreadd here (%q, %v): no kernel thread at a known pid", comm, err)
	}
	_, err = Identify("/proc", 2)
	if os.Getuid() != 0 {
		// The kernel checks the right to look before it says there is
		// nothing to see.
		if !errors.Is(err, os.ErrPermission) {
			t.Errorf("Identify(kthreadd) as uid %d = %v, want a permission error", os.Getuid(), err)
		}
		return
	}
	if !errors.Is(err, ErrNoExecutable) || errors.Is(err, ErrGone) {
		t.Errorf("Identify(kthreadd) = %v, want ErrNoExecutable", err)
	}
}

func TestIdentifyBadInput(t *testing.T) {
	for _, pid := range []int{0, -1} {
		if _, err := Identify("/proc", pid); err == nil || !strings.Contains(err.Error(), "not a process id") {
			t.Errorf("Identify(%d) = %v, want a bad-pid error", pid, err)
		}
	}
	if _, err := Identify(t.TempDir(), 1); !errors.Is(err, ErrGone) {
		t.Errorf("Identify in an empty proc root = %v, want ErrGone", err)
	}
}

// A process of another user: an unprivileged reader gets a permission error
// naming CAP_SYS_PTRACE, not "gone". The reader is this test binary run
// again as user nobody.
func TestIdentifyPermissionDenied(t *testing.T) {
	testenv.Root(t)
	target := startSleep(t, sleepPath(t), nil) // root's
	out := runHelper(t, "identify", []string{"TT_PID=" + strconv.Itoa(target.Process.Pid)},
		&syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}})
	var r helperResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("helper said %q: %v", out, err)
	}
	if !r.Permission || r.Gone || !strings.Contains(r.Err, "CAP_SYS_PTRACE") {
		t.Errorf("as nobody: %+v, want a permission error naming CAP_SYS_PTRACE", r)
	}
}

type helperResult struct {
	Err        string   `json:"err,omitempty"`
	Permission bool     `json:"permission"`
	Gone       bool     `json:"gone"`
	ID         Identity `json:"id"`
	Dir        string   `json:"dir,omitempty"`
	CgroupID   uint64   `json:"cgroup_id,omitempty"`
	NSRoot     string   `json:"ns_root,omitempty"`
}

// runHelper runs this test binary again as TestHelperProcess, from a copy
// every user can execute, and returns what it printed.
func runHelper(t *testing.T, mode string, env []string, attr *syscall.SysProcAttr, wrap ...string) []byte {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "tt-workload-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "workload.test")
	testenv.CopyFile(t, self, bin, 0o755)
	args := append(append([]string{}, wrap...), bin, "-test.run=^TestHelperProcess$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(append(os.Environ(), "TT_WORKLOAD_HELPER="+mode), env...)
	cmd.SysProcAttr = attr
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper %s: %v (stdout %q)", mode, err, out)
	}
	line := out
	if i := strings.IndexByte(string(out), '\n'); i >= 0 {
		line = out[:i]
	}
	return line
}

// TestHelperProcess is not a test: the other tests run it in a changed
// environment (another user, a cgroup namespace). It prints one JSON line.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv("TT_WORKLOAD_HELPER")
	if mode == "" {
		t.Skip("runs only as a helper of the live tests")
	}
	pid, _ := strconv.Atoi(os.Getenv("TT_PID"))
	var r helperResult
	id, err := Identify("/proc", pid)
	r.ID = id
	if err != nil {
		r.Err, r.Permission, r.Gone = err.Error(), errors.Is(err, os.ErrPermission), errors.Is(err, ErrGone)
	}
	if mode == "cgroupfs" {
		fs, err := OpenCgroupfs(os.Getenv("TT_CGROUP_ROOT"), "/proc")
		if err != nil {
			r.Err = err.Error()
		} else {
			r.NSRoot = fs.NamespaceRoot()
			if r.Dir, r.CgroupID, err = fs.Dir(id.Cgroup); err != nil {
				r.Err = err.Error()
			}
		}
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

// cgroupLab makes cgroup v2 directories for one test under a directory of
// its own at the top of the hierarchy, and removes them at the end.
type cgroupLab struct {
	t    *testing.T
	fs   *Cgroupfs
	top  string // "/tt-workload-PID.slice"
	dirs []string
}

func newCgroupLab(t *testing.T) *cgroupLab {
	t.Helper()
	testenv.Root(t)
	fs, err := OpenCgroupfs("/sys/fs/cgroup", "/proc")
	if err != nil {
		t.Skipf("no cgroup v2 hierarchy to make cgroups in: %v", err)
	}
	l := &cgroupLab{t: t, fs: fs, top: fmt.Sprintf("/tt-workload-%d.slice", os.Getpid())}
	t.Cleanup(func() {
		for i := len(l.dirs) - 1; i >= 0; i-- {
			if err := os.Remove(l.dirs[i]); err != nil {
				t.Errorf("remove cgroup: %v", err)
			}
		}
	})
	return l
}

// mkdir makes the cgroup at top+rel (and its parents) and returns an open
// directory for SysProcAttr.CgroupFD.
func (l *cgroupLab) mkdir(rel string) (path string, f *os.File) {
	l.t.Helper()
	p := ""
	for _, part := range strings.Split(strings.Trim(l.top+rel, "/"), "/") {
		p += "/" + part
		dir := filepath.Join(l.fs.Root(), p)
		if err := os.Mkdir(dir, 0o755); err == nil {
			l.dirs = append(l.dirs, dir)
		} else if !errors.Is(err, os.ErrExist) {
			l.t.Skipf("cannot make cgroups here: %v", err)
		}
	}
	f, err := os.Open(filepath.Join(l.fs.Root(), p))
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { f.Close() })
	return p, f
}

const podScope = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope"

// A process in a cgroup laid out like a containerd pod's (systemd driver)
// is identified with its container and pod, and its cgroup directory and
// ID are found under the cgroup root.
func TestIdentifyInContainerCgroup(t *testing.T) {
	lab := newCgroupLab(t)
	path, dir := lab.mkdir(podScope)
	cmd := startSleep(t, sleepPath(t), &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())})
	id, err := Identify("/proc", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Container{RuntimeContainerd, cid, uid, QoSBurstable}); id.Container != want || id.Cgroup != path {
		t.Errorf("got %+v in %q, want %+v in %q", id.Container, id.Cgroup, want, path)
	}
	got, cgid, err := lab.fs.Dir(id.Cgroup)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(lab.fs.Root(), path); got != want || cgid != fileIDOf(t, want).Ino {
		t.Errorf("Dir = %s id %d, want %s id %d", got, cgid, want, fileIDOf(t, want).Ino)
	}
	if _, _, err := lab.fs.Dir("/tt-no-such-cgroup"); err == nil || !strings.Contains(err.Error(), "removed") {
		t.Errorf("Dir of a missing cgroup = %v, want an error saying it may have been removed", err)
	}
}

// The daemon's pod runs in a private cgroup namespace: there /proc shows
// other pods' cgroups as "/../../..." paths. The reader here is this test
// binary run under "unshare --cgroup" from a cgroup of its own, like a
// container; it must still find the container and the cgroup directory.
func TestCgroupNamespaceReader(t *testing.T) {
	lab := newCgroupLab(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("no unshare command (util-linux): %v", err)
	}
	path, podDir := lab.mkdir(podScope)
	daemonPath, daemonDir := lab.mkdir("/daemon.slice/daemon.scope")
	target := startSleep(t, sleepPath(t), &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(podDir.Fd())})

	out := runHelper(t, "cgroupfs", []string{"TT_PID=" + strconv.Itoa(target.Process.Pid), "TT_CGROUP_ROOT=/sys/fs/cgroup"},
		&syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(daemonDir.Fd())}, "unshare", "--cgroup")
	var r helperResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("helper said %q: %v", out, err)
	}
	if r.Err != "" {
		t.Fatalf("helper: %s", r.Err)
	}
	if !strings.HasPrefix(r.ID.Cgroup, "/../..") {
		t.Errorf("the reader sees %q: not from inside a namespace", r.ID.Cgroup)
	}
	if want := (Container{RuntimeContainerd, cid, uid, QoSBurstable}); r.ID.Container != want {
		t.Errorf("from the namespace: %+v, want %+v", r.ID.Container, want)
	}
	want := filepath.Join(lab.fs.Root(), path)
	if r.NSRoot != daemonPath || r.Dir != want || r.CgroupID != fileIDOf(t, want).Ino {
		t.Errorf("namespace root %q, dir %q id %d; want %q, %q id %d", r.NSRoot, r.Dir, r.CgroupID, daemonPath, want, fileIDOf(t, want).Ino)
	}
}

// The capabilities the DaemonSet grants are enough to identify processes
// of other users and processes holding more capabilities than the reader,
// and CAP_SYS_PTRACE is the one that makes it so: without it, both are
// denied. The reader is this test binary run as root with its bounding set
// cut to the manifest's capabilities (as the container runtime does).
func TestIdentifyWithManifestCapabilities(t *testing.T) {
	testenv.Root(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skipf("no setpriv (util-linux): %v", err)
	}
	caps, err := deploy.Capabilities()
	if err != nil {
		t.Fatal(err)
	}
	var noPtrace []string
	for _, c := range caps {
		if c != "SYS_PTRACE" {
			noPtrace = append(noPtrace, c)
		}
	}
	bin := sleepPath(t)
	otherUser := startSleep(t, bin, &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}})
	fullRoot := startSleep(t, bin, nil) // root with every capability: more than the reader has

	for _, tc := range []struct {
		name   string
		caps   []string
		target *exec.Cmd
		ok     bool
	}{
		{"manifest caps, other user", caps, otherUser, true},
		{"manifest caps, root with more caps", caps, fullRoot, true},
		{"no SYS_PTRACE, other user", noPtrace, otherUser, false},
		{"no SYS_PTRACE, root with more caps", noPtrace, fullRoot, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := runHelper(t, "identify", []string{"TT_PID=" + strconv.Itoa(tc.target.Process.Pid)}, nil,
				"setpriv", "--inh-caps=-all", "--bounding-set=-all,"+deploy.SetprivCaps(tc.caps), "--")
			var r helperResult
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("helper said %q: %v", out, err)
			}
			if tc.ok && (r.Err != "" || r.ID.File != fileIDOf(t, bin)) {
				t.Errorf("with %v: %+v, want the executable identified", tc.caps, r)
			}
			if !tc.ok && (!r.Permission || !strings.Contains(r.Err, "CAP_SYS_PTRACE")) {
				t.Errorf("with %v: %+v, want a permission error naming CAP_SYS_PTRACE", tc.caps, r)
			}
		})
	}
}

// BenchmarkIdentify: the cost of naming one process, as the daemon does
// for every process in its first scan of /proc and on every exec.
func BenchmarkIdentify(b *testing.B) {
	pid := os.Getpid()
	for b.Loop() {
		if _, err := Identify("/proc", pid); err != nil {
			b.Fatal(err)
		}
	}
}
