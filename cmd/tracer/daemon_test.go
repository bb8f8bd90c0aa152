package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/timeout-tracer/tracer/deploy"
	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/lab/testenv"
	"github.com/timeout-tracer/tracer/lab/testprog"
)

// daemonRun is a `tracer daemon` under test: its JSON logs and reports,
// read as they come.
type daemonRun struct {
	t       *testing.T
	cmd     *exec.Cmd
	mu      sync.Mutex
	logs    []map[string]any
	reports []export.TimeoutJSON
	other   []string // stdout lines of other kinds (deadline_missing, hung_call)
	changed chan struct{}
	done    chan struct{}
	stderr  strings.Builder
}

// startDaemon runs the daemon with JSON logs and JSON reports.
func startDaemon(t *testing.T, wrap []string, args ...string) *daemonRun {
	t.Helper()
	argv := append(append([]string(nil), wrap...), testprog.Tracer(t), "daemon", "--log-format", "json", "-o", "json", "--metrics-addr", "127.0.0.1:0")
	argv = append(argv, args...)
	d := &daemonRun{t: t, cmd: exec.Command(argv[0], argv[1:]...), changed: make(chan struct{}, 1), done: make(chan struct{})}
	stdout, _ := d.cmd.StdoutPipe()
	stderr, _ := d.cmd.StderrPipe()
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.done
	})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var r export.TimeoutJSON
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				continue
			}
			if r.Kind != "timeout" {
				d.mu.Lock()
				d.other = append(d.other, sc.Text())
				d.mu.Unlock()
				d.poke()
				continue
			}
			d.mu.Lock()
			d.reports = append(d.reports, r)
			d.mu.Unlock()
			d.poke()
		}
	}()
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			d.mu.Lock()
			d.stderr.WriteString(sc.Text() + "\n")
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				d.logs = append(d.logs, m)
			}
			d.mu.Unlock()
			d.poke()
		}
	}()
	go func() {
		wg.Wait()
		close(d.done)
	}()
	return d
}

func (d *daemonRun) poke() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds (checked on every new line), or fails
// the test after a generous bound: the daemon hung or never did it.
func (d *daemonRun) waitFor(what string, cond func() bool) {
	d.t.Helper()
	limit := time.After(60 * time.Second)
	for {
		d.mu.Lock()
		ok := cond()
		d.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-d.changed:
		case <-time.After(100 * time.Millisecond):
		case <-d.done:
			d.mu.Lock()
			ok := cond()
			d.mu.Unlock()
			if !ok {
				d.t.Fatalf("daemon ended before %s:\n%s", what, d.stderr.String())
			}
			return
		case <-limit:
			d.t.Fatalf("daemon: no %s within a minute:\n%s", what, d.stderr.String())
		}
	}
}

// logged: a log line with this message for this pid exists (mu held).
func (d *daemonRun) logged(msg string, pid int) bool {
	for _, m := range d.logs {
		if m["msg"] == msg && (pid == 0 || m["pid"] == float64(pid)) {
			return true
		}
	}
	return false
}

// addr is where the daemon serves /metrics, /healthz and /readyz.
func (d *daemonRun) addr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.logs {
		if m["msg"] == "serving /metrics, /healthz, /readyz" {
			return fmt.Sprint(m["addr"])
		}
	}
	d.t.Fatalf("the daemon did not say where it serves:\n%s", d.stderr.String())
	return ""
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (d *daemonRun) reportsOf(pid int) []export.TimeoutJSON {
	var out []export.TimeoutJSON
	for _, r := range d.reports {
		if int(r.PID) == pid {
			out = append(out, r)
		}
	}
	return out
}

// labProg is a deadlines target waiting for "go" on stdin.
type labProg struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startProg starts the program (in cgroup dir cg when set, from its first
// instruction: clone3 into the cgroup) and waits until it is ready.
func startProg(t *testing.T, path, cg string, args ...string) *labProg {
	t.Helper()
	cmd := exec.Command(path, args...)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if cg != "" {
		f, err := os.Open(cg)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("target not ready: %q %v", line, err)
	}
	go io.Copy(io.Discard, out)
	return &labProg{cmd: cmd, stdin: stdin}
}

func (p *labProg) pid() int { return p.cmd.Process.Pid }
func (p *labProg) run()     { io.WriteString(p.stdin, "go\n") }

// uniqueProg copies the deadlines target under a name of this test's own,
// so the daemon's --include-exe picks only this test's processes.
func uniqueProg(t *testing.T) (path, name string) {
	t.Helper()
	return uniqueCopy(t, "deadlines", "ttd")
}

// uniqueCopy copies test program prog under a name of this test's own.
func uniqueCopy(t *testing.T, prog, prefix string) (path, name string) {
	t.Helper()
	src := testprog.Path(t, prog)
	name = fmt.Sprintf("%s%d", prefix, os.Getpid())
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	path = filepath.Join(dir, name)
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path, name
}

// podCgroup makes a cgroup v2 directory laid out like a containerd pod's
// under the systemd driver and returns it with its container and pod IDs.
func podCgroup(t *testing.T) (dir, containerID, podUID string) {
	t.Helper()
	root := cgroup2Root()
	if root == "" {
		t.Skip("needs a cgroup v2 hierarchy (none mounted)")
	}
	podUID = fmt.Sprintf("5e1f0a2b-%04x-4c3d-9e8f-%012x", os.Getpid()&0xffff, time.Now().UnixNano()&0xffffffffffff)
	containerID = fmt.Sprintf("%016x%016x%016x%016x", os.Getpid(), time.Now().UnixNano(), 0xc0ffee, 0xdecaf)
	base := filepath.Join(root, "tt-kubepods.slice")
	pod := filepath.Join(base, "tt-kubepods-besteffort.slice", "kubepods-besteffort-pod"+strings.ReplaceAll(podUID, "-", "_")+".slice")
	dir = filepath.Join(pod, "cri-containerd-"+containerID+".scope")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() {
		// Emptied when its processes have exited (their cleanups run first).
		for _, d := range []string{dir, pod, filepath.Dir(pod), base} {
			for i := 0; i < 50 && os.Remove(d) != nil && !errors.Is(os.Remove(d), os.ErrNotExist); i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	return dir, containerID, podUID
}

// cgroup2Root is where the cgroup v2 hierarchy is mounted (the unified
// mount of a hybrid layout too), "" when nowhere.
func cgroup2Root() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if f := strings.Fields(pre); len(f) >= 5 {
			return f[4]
		}
	}
	return ""
}

// fdKinds counts the daemon's open file descriptors by kind.
func fdKinds(t *testing.T, pid int) (total, links, perf int) {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		total++
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		switch {
		case strings.Contains(target, "bpf_link"):
			links++
		case strings.Contains(target, "perf_event"):
			perf++
		}
	}
	return total, links, perf
}

// bpfIDs are the IDs of the BPF programs, maps and links a process holds.
func bpfIDs(t *testing.T, pid int) (progs, maps, links []uint32) {
	t.Helper()
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fdinfo", pid))
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err != nil {
				continue
			}
			switch k {
			case "prog_id":
				progs = append(progs, uint32(id))
			case "map_id":
				maps = append(maps, uint32(id))
			case "link_id":
				links = append(links, uint32(id))
			}
		}
	}
	return progs, maps, links
}

// TestDaemon: one program traced from before the daemon started, two
// started after (one in a containerd-like pod cgroup), all reported with
// their identity; exits detach; 50 start/exit cycles leave no descriptors
// or BPF links behind; SIGTERM ends it cleanly with nothing left loaded.
func TestDaemon(t *testing.T) {
	requireGoTracing(t)
	prog, name := uniqueProg(t)
	cg, containerID, podUID := podCgroup(t)

	a := startProg(t, prog, "", "-rounds", "1")
	d := startDaemon(t, nil, "--include-exe", name, "--detail", "always")
	d.waitFor("node agent ready", func() bool { return d.logged("node agent ready", 0) })
	d.waitFor("tracing the program started before", func() bool { return d.logged("tracing process", a.pid()) })
	addr := d.addr()
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := httpGet(t, "http://"+addr+path); code != 200 {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}

	b := startProg(t, prog, "", "-rounds", "1", "-linger", "30s")
	c := startProg(t, prog, cg, "-rounds", "1", "-linger", "30s")
	for _, p := range []*labProg{b, c} {
		d.waitFor(fmt.Sprintf("tracing pid %d", p.pid()), func() bool { return d.logged("tracing process", p.pid()) })
	}
	for _, p := range []*labProg{a, b, c} {
		p.run()
	}
	for _, p := range []*labProg{a, b, c} {
		d.waitFor(fmt.Sprintf("reports of pid %d", p.pid()), func() bool { return len(d.reportsOf(p.pid())) > 0 })
	}
	d.mu.Lock()
	for _, r := range d.reportsOf(c.pid()) {
		if r.ContainerID != containerID || r.PodUID != podUID {
			t.Errorf("pod program's report says container %q pod %q, want %q %q", r.ContainerID, r.PodUID, containerID, podUID)
		}
		if r.BudgetMs == nil {
			t.Errorf("--detail=always report without its budget: %+v", r)
		}
	}
	for _, r := range d.reportsOf(b.pid()) {
		if r.ContainerID != "" || r.PodUID != "" {
			t.Errorf("program outside any pod reported in container %q pod %q", r.ContainerID, r.PodUID)
		}
	}
	d.mu.Unlock()
	// a ran its round and exits: detached; b and c are killed: detached.
	d.waitFor("the exited program detached", func() bool { return d.logged("detached process", a.pid()) })
	for _, p := range []*labProg{b, c} {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		d.waitFor(fmt.Sprintf("detached pid %d", p.pid()), func() bool { return d.logged("detached process", p.pid()) })
	}

	if _, body := httpGet(t, "http://"+addr+"/metrics"); !strings.Contains(body, "timeout_tracer_context_endings_total") ||
		!strings.Contains(body, `timeout_tracer_processes_skipped_total{reason="not_included"}`) {
		t.Errorf("/metrics lacks the timeout and skipped-process counts:\n%s", body)
	}

	// 50 start/exit cycles: nothing grows.
	dpid := d.cmd.Process.Pid
	cycle := func() {
		p := startProg(t, prog, "")
		d.waitFor(fmt.Sprintf("tracing pid %d", p.pid()), func() bool { return d.logged("tracing process", p.pid()) })
		p.cmd.Process.Kill()
		p.cmd.Wait()
		d.waitFor(fmt.Sprintf("detached pid %d", p.pid()), func() bool { return d.logged("detached process", p.pid()) })
	}
	cycle() // warm: first-time allocations (goroutines, caches) are not growth
	total0, links0, perf0 := fdKinds(t, dpid)
	for i := 0; i < 50; i++ {
		cycle()
	}
	total1, links1, perf1 := fdKinds(t, dpid)
	t.Logf("daemon fds before/after 50 cycles: total %d/%d, bpf links %d/%d, perf events %d/%d", total0, total1, links0, links1, perf0, perf1)
	if links1 > links0 || perf1 > perf0 {
		t.Errorf("BPF links or perf events grew over 50 cycles: links %d -> %d, perf %d -> %d", links0, links1, perf0, perf1)
	}
	if total1 > total0+2 { // the metrics listener may hold a connection
		t.Errorf("open file descriptors grew over 50 cycles: %d -> %d", total0, total1)
	}

	// SIGTERM: exits within its bound, nothing of its own left loaded.
	progs, maps, links := bpfIDs(t, dpid)
	if len(progs) == 0 || len(maps) == 0 || len(links) == 0 {
		t.Fatalf("daemon holds no BPF programs/maps/links? %d/%d/%d", len(progs), len(maps), len(links))
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("daemon still running 30 s after SIGTERM (its --shutdown-timeout is 10 s):\n%s", d.stderr.String())
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("daemon exit after SIGTERM: %v\n%s", err, d.stderr.String())
	}
	if !d.logged("node agent stopped", 0) {
		t.Errorf("no clean stop logged:\n%s", d.stderr.String())
	}
	// The kernel frees them once their last reference goes, some after an
	// RCU grace period: wait for that (bounded), then name what is left.
	left := func() (out []string) {
		for _, id := range progs {
			if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id)); err == nil {
				p.Close()
				out = append(out, fmt.Sprintf("program %d", id))
			}
		}
		for _, id := range maps {
			if m, err := ebpf.NewMapFromID(ebpf.MapID(id)); err == nil {
				m.Close()
				out = append(out, fmt.Sprintf("map %d", id))
			}
		}
		for _, id := range links {
			if l, err := link.NewFromID(link.ID(id)); err == nil {
				l.Close()
				out = append(out, fmt.Sprintf("link %d", id))
			}
		}
		return out
	}
	var still []string
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if still = left(); len(still) == 0 || time.Now().After(end) {
			break
		}
	}
	if len(still) > 0 {
		t.Errorf("BPF objects of the daemon still exist 20 s after it exited: %v", still)
	}
}

// capBits are the capabilities deploy/daemonset.yaml may grant.
var capBits = map[string]uint{"BPF": unix.CAP_BPF, "PERFMON": unix.CAP_PERFMON, "SYS_PTRACE": unix.CAP_SYS_PTRACE,
	"SYS_RESOURCE": unix.CAP_SYS_RESOURCE, "SYS_ADMIN": unix.CAP_SYS_ADMIN, "NET_ADMIN": unix.CAP_NET_ADMIN}

// statusCaps reads a Cap* line of /proc/PID/status.
func statusCaps(t *testing.T, pid int, field string) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestDaemonManifestCapabilities runs the daemon as root with only the
// capabilities deploy/daemonset.yaml grants (setpriv drops the others from
// its bounding set) and shows it traces: a program's timeouts are reported.
func TestDaemonManifestCapabilities(t *testing.T) {
	requireGoTracing(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skipf("needs setpriv (util-linux): %v", err)
	}
	caps, err := deploy.Capabilities()
	if err != nil {
		t.Fatal(err)
	}
	// The manifest's capabilities this machine can give at all: a
	// container's own bounding set may lack some (SYS_RESOURCE, only for
	// kernels before 5.11, is missing from some sandboxes).
	own := statusCaps(t, os.Getpid(), "CapBnd")
	var grant []string
	var want uint64
	for _, c := range caps {
		bit, ok := capBits[c]
		if !ok {
			t.Fatalf("the manifest grants %s: the test does not know it", c)
		}
		if own&(1<<bit) == 0 {
			t.Logf("this machine's bounding set lacks CAP_%s: not granted", c)
			continue
		}
		grant = append(grant, c)
		want |= 1 << bit
	}
	prog, name := uniqueProg(t)
	d := startDaemon(t, []string{setpriv, "--bounding-set=-all," + deploy.SetprivCaps(grant), "--inh-caps=-all"}, "--include-exe", name)
	d.waitFor("node agent ready", func() bool { return d.logged("node agent ready", 0) })
	if got := statusCaps(t, d.cmd.Process.Pid, "CapEff"); got != want {
		t.Fatalf("daemon's effective capabilities %#x, want exactly the manifest's %#x", got, want)
	}
	p := startProg(t, prog, "", "-rounds", "1")
	d.waitFor(fmt.Sprintf("tracing pid %d", p.pid()), func() bool { return d.logged("tracing process", p.pid()) })
	p.run()
	d.waitFor("reports of the program", func() bool { return len(d.reportsOf(p.pid())) > 0 })
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.logs {
		if m["msg"] == "node agent ready" {
			t.Logf("traced with capabilities %v only (uprobes as %v)", grant, m["uprobes"])
		}
	}
}

// TestDaemonBadInput: each mistake in the daemon's flags or config file is
// one line saying what to do; a config file sets flags the command line
// does not.
func TestDaemonBadInput(t *testing.T) {
	tracer := testprog.Tracer(t)
	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.yaml")
	os.WriteFile(unknown, []byte("include-exe: [api]\nfrobnicate: 3\n"), 0o644)
	badList := filepath.Join(dir, "badlist.yaml")
	os.WriteFile(badList, []byte("max-processes: [1, 2]\n"), 0o644)
	badFormat := filepath.Join(dir, "badformat.yaml")
	os.WriteFile(badFormat, []byte("log-format: xml\n"), 0o644)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"log format", []string{"daemon", "--log-format", "xml"}, `unknown --log-format "xml": use text or json`},
		{"output", []string{"daemon", "-o", "yaml"}, `unknown output format "yaml"`},
		{"detail", []string{"daemon", "--detail", "sometimes"}, `unknown --detail "sometimes"`},
		{"cap", []string{"daemon", "--max-processes", "0"}, "--max-processes must be positive"},
		{"glob", []string{"daemon", "--include-exe", "[a-"}, `filter --include-exe "[a-"`},
		{"proc root", []string{"daemon", "--proc-root", "/nonexistent"}, "--proc-root /nonexistent is not a readable directory"},
		{"config missing", []string{"daemon", "--config", filepath.Join(dir, "none.yaml")}, "read --config"},
		{"config unknown key", []string{"daemon", "--config", unknown}, `unknown setting "frobnicate"`},
		{"config list for a scalar", []string{"daemon", "--config", badList}, "max-processes takes one value, not a list"},
		{"config value", []string{"daemon", "--config", badFormat}, `unknown --log-format "xml"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkOneLineError(t, exec.Command(tracer, tc.args...), tc.want)
		})
	}
	t.Run("not root", func(t *testing.T) {
		if os.Geteuid() != 0 {
			checkOneLineError(t, exec.Command(tracer, "daemon"), "insufficient privileges")
			return
		}
		testenv.Root(t)
		if _, err := exec.LookPath("setpriv"); err != nil {
			t.Skip("setpriv (util-linux) not installed: cannot drop root for this case")
		}
		checkOneLineError(t, exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
			tracer, "daemon", "--metrics-addr", ""), "insufficient privileges: need root, or CAP_BPF and CAP_PERFMON")
	})
	t.Run("nested PID namespace", func(t *testing.T) {
		testenv.Root(t)
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Skip("unshare (util-linux) not installed")
		}
		checkOneLineError(t, exec.Command("unshare", "--pid", "--fork", "--mount-proc", tracer, "daemon", "--metrics-addr", ""),
			"the node agent runs in a nested PID namespace")
	})
	t.Run("command line wins over config", func(t *testing.T) {
		// The config's bad value is not used: the flag given wins.
		checkOneLineError(t, exec.Command(tracer, "daemon", "--config", badFormat, "--log-format", "json", "--max-processes", "-1"),
			"--max-processes must be positive")
	})
}

// TestDaemonProcessStorm: 1000 short-lived Go processes started and ended
// as fast as they can, 8 at a time, under the daemon: its memory stays
// bounded, its descriptors and BPF links come back to where they were, every
// exec/exit event lost is counted, and it still traces a process started
// after the storm.
func TestDaemonProcessStorm(t *testing.T) {
	requireGoTracing(t)
	prog, name := uniqueProg(t)
	d := startDaemon(t, nil, "--include-exe", name)
	d.waitFor("node agent ready", func() bool { return d.logged("node agent ready", 0) })
	dpid := d.cmd.Process.Pid
	warm := startProg(t, prog, "")
	d.waitFor("the first process traced", func() bool { return d.logged("tracing process", warm.pid()) })
	warm.cmd.Process.Kill()
	warm.cmd.Wait()
	d.waitFor("the first process detached", func() bool { return d.logged("detached process", warm.pid()) })
	total0, links0, _ := fdKinds(t, dpid)
	rss0 := statusKB(t, dpid, "VmRSS")

	const n, par = 1000, 8
	var wg sync.WaitGroup
	next := make(chan int)
	var failed atomicCount
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				if err := exec.Command(prog, "-wait=false", "-rounds", "0", "-http=false").Run(); err != nil {
					failed.add()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if failed.n > 0 {
		t.Fatalf("%d of %d storm processes failed to run", failed.n, n)
	}

	// After the storm: a new process is traced, and the storm's processes
	// are all detached (none is left traced: they all exited).
	p := startProg(t, prog, "")
	d.waitFor("a process after the storm traced", func() bool { return d.logged("tracing process", p.pid()) })
	p.cmd.Process.Kill()
	p.cmd.Wait()
	d.waitFor("it detached", func() bool { return d.logged("detached process", p.pid()) })
	count := func() (attached, detached int) {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, m := range d.logs {
			switch m["msg"] {
			case "tracing process":
				attached++
			case "detached process":
				detached++
			}
		}
		return attached, detached
	}
	// CI saw one storm process of 1000 still traced right after the storm
	// on December 6 (before the agent read PF_EXITING and start times; the
	// cause not confirmed). Whatever slips past the exit event is detached
	// by the next rescan at the latest (every 30 s: "gone"): wait for it.
	attached, detached := count()
	for wait := time.Now(); attached != detached && time.Since(wait) < 40*time.Second; attached, detached = count() {
		time.Sleep(250 * time.Millisecond)
	}
	total1, links1, _ := fdKinds(t, dpid)
	rss1 := statusKB(t, dpid, "VmRSS")
	_, metrics := httpGet(t, "http://"+d.addr()+"/metrics")
	lost := metricValue(metrics, `timeout_tracer_ringbuffer_lost_events_total{source="proc"}`)
	t.Logf("storm of %d processes: %d attached, %d detached; proc events lost %v; fds %d -> %d, bpf links %d -> %d, RSS %d -> %d KiB",
		n, attached, detached, lost, total0, total1, links0, links1, rss0, rss1)
	if attached != detached {
		t.Errorf("%d processes attached but %d detached: some storm process is still traced", attached, detached)
	}
	if links1 > links0 || total1 > total0+2 {
		t.Errorf("descriptors grew over the storm: fds %d -> %d, bpf links %d -> %d", total0, total1, links0, links1)
	}
	if rss1 > rss0+64*1024 {
		t.Errorf("RSS grew by more than 64 MiB over the storm: %d -> %d KiB", rss0, rss1)
	}
	if lost == "" {
		t.Errorf("/metrics does not count lost process events")
	}
}

type atomicCount struct {
	mu sync.Mutex
	n  int
}

func (c *atomicCount) add() { c.mu.Lock(); c.n++; c.mu.Unlock() }

func statusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}

// metricValue is the value of one series in a text exposition, "" when
// absent.
func metricValue(exposition, series string) string {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestDaemonSameImageTwoContainers: two processes run one executable file
// through two overlayfs mounts, as two containers of one image do: the
// agent sees two files (two devices) and attaches the cold probes for each,
// but the kernel puts uprobes on the file underneath, so both attachments
// fire for either process. Each expiry is still reported exactly once.
func TestDaemonSameImageTwoContainers(t *testing.T) {
	requireGoTracing(t)
	prog, name := uniqueProg(t)
	base := t.TempDir()
	lower := filepath.Join(base, "lower")
	os.MkdirAll(lower, 0o755)
	data, _ := os.ReadFile(prog)
	os.WriteFile(filepath.Join(lower, name), data, 0o755)
	var merged []string
	for i := 0; i < 2; i++ {
		up, work, m := filepath.Join(base, fmt.Sprint("up", i)), filepath.Join(base, fmt.Sprint("work", i)), filepath.Join(base, fmt.Sprint("merged", i))
		for _, d := range []string{up, work, m} {
			os.MkdirAll(d, 0o755)
		}
		if err := unix.Mount("overlay", m, "overlay", 0, fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, up, work)); err != nil {
			t.Skipf("cannot mount overlayfs: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(m, unix.MNT_DETACH) })
		merged = append(merged, filepath.Join(m, name))
	}
	var st0, st1 unix.Stat_t
	unix.Stat(merged[0], &st0)
	unix.Stat(merged[1], &st1)
	if st0.Dev == st1.Dev && st0.Ino == st1.Ino {
		t.Skip("the two overlay mounts show one file: nothing to test here")
	}
	d := startDaemon(t, nil, "--include-exe", name, "--detail", "never")
	d.waitFor("node agent ready", func() bool { return d.logged("node agent ready", 0) })

	type target struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Reader
	}
	var ts []target
	for _, path := range merged {
		cmd := exec.Command(path, "-rounds", "3", "-http=false")
		stdin, _ := cmd.StdinPipe()
		outp, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		out := bufio.NewReader(outp)
		if line, err := out.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
			t.Fatalf("target not ready: %q %v", line, err)
		}
		d.waitFor(fmt.Sprintf("tracing pid %d", cmd.Process.Pid), func() bool { return d.logged("tracing process", cmd.Process.Pid) })
		ts = append(ts, target{cmd, stdin, out})
	}
	for _, tg := range ts {
		io.WriteString(tg.stdin, "go\n")
	}
	for _, tg := range ts {
		var counts targetCounts
		rest, _ := io.ReadAll(tg.out)
		if err := json.Unmarshal(rest, &counts); err != nil {
			t.Fatalf("target output %q: %v", rest, err)
		}
		tg.cmd.Wait()
		pid := tg.cmd.Process.Pid
		d.waitFor(fmt.Sprintf("detached pid %d", pid), func() bool { return d.logged("detached process", pid) })
		// Its last reports come out after the correlator's grace window.
		d.waitFor(fmt.Sprintf("the %d expiries of pid %d", counts.Expired, pid), func() bool { return len(d.reportsOf(pid)) >= counts.Expired })
		time.Sleep(2 * time.Second) // a duplicate would come right behind
		d.mu.Lock()
		got := len(d.reportsOf(pid))
		d.mu.Unlock()
		if got != counts.Expired {
			t.Errorf("pid %d: %d reports, the target counted %d expiries (each reported once?)", pid, got, counts.Expired)
		}
	}
}

// TestDaemonContextStorm: a process expiring deadlines as fast as it can
// under the daemon. The per-executable storm guard takes its probes off
// (and says so), the daemon's memory stays under its bound, and once the
// storm is over the probes come back: the calm phase's expiries are
// reported.
func TestDaemonContextStorm(t *testing.T) {
	requireGoTracing(t)
	prog, name := uniqueCopy(t, "ctxstorm", "ttstorm")
	d := startDaemon(t, nil, "--include-exe", name, "--detail", "never", "--storm-cooldown", "1s")
	d.waitFor("node agent ready", func() bool { return d.logged("node agent ready", 0) })
	tgt := exec.Command(prog, "-storm", "4s", "-after", "6", "-every", "100ms")
	stdin, _ := tgt.StdinPipe()
	tout, _ := tgt.StdoutPipe()
	if err := tgt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tgt.Process.Kill(); tgt.Wait() })
	tr := bufio.NewReader(tout)
	if line, err := tr.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("target not ready: %q %v", line, err)
	}
	pid := tgt.Process.Pid
	d.waitFor("the storm target traced", func() bool { return d.logged("tracing process", pid) })
	peak := watchRSS(d.cmd.Process.Pid)

	stdin.Write([]byte("storm\n"))
	var st struct {
		Storm int64   `json:"storm"`
		Rate  float64 `json:"rate"`
	}
	if err := json.NewDecoder(strings.NewReader(mustLine(t, tr))).Decode(&st); err != nil {
		t.Fatal(err)
	}
	stormLogs := func() (detached, reattached int) {
		for _, m := range d.logs {
			if m["msg"] == "storm guard" && m["pid"] == float64(pid) {
				if m["probes_detached"] == true {
					detached++
				} else {
					reattached++
				}
			}
		}
		return
	}
	d.waitFor("the storm guard tripping", func() bool { n, _ := stormLogs(); return n > 0 })
	// A trip in the storm's last second is logged after the storm line
	// (seen in CI: the third trip 30 ms before the storm's end, its log
	// not yet read when the probes looked back, the calm phase then
	// expiring while they were off). Past a cool-down after the storm no
	// trip is to come.
	time.Sleep(1500 * time.Millisecond)
	d.waitFor("the probes back after the storm", func() bool { n, r := stormLogs(); return r >= n })
	calmFrom := time.Now()
	stdin.Write([]byte("calm\n"))
	var calm struct {
		Calm int `json:"calm"`
	}
	if err := json.NewDecoder(strings.NewReader(mustLine(t, tr))).Decode(&calm); err != nil {
		t.Fatal(err)
	}
	calmReports := func() int {
		n := 0
		for _, r := range d.reportsOf(pid) {
			if at, err := time.Parse(time.RFC3339Nano, r.Time); err == nil && at.After(calmFrom) {
				n++
			}
		}
		return n
	}
	d.waitFor(fmt.Sprintf("the %d calm-phase expiries reported", calm.Calm), func() bool { return calmReports() >= calm.Calm })
	rss := peak()
	d.mu.Lock()
	trips, _ := stormLogs()
	reports := len(d.reportsOf(pid))
	d.mu.Unlock()
	t.Logf("target: %d storm expiries (%.0f/s while traced), %d calm; daemon: %d reports, storm guard trips %d; peak RSS %.1f MiB",
		st.Storm, st.Rate, calm.Calm, reports, trips, float64(rss)/(1<<20))
	if rss > stormRSSBound {
		t.Errorf("daemon peak RSS %.1f MiB over its bound %d MiB", float64(rss)/(1<<20), stormRSSBound>>20)
	}
	_, metrics := httpGet(t, "http://"+d.addr()+"/metrics")
	if v := metricValue(metrics, "timeout_tracer_storm_guard_trips_total"); v == "" || v == "0" {
		t.Errorf("storm guard trips not in /metrics (%q)", v)
	}
}

// TestDaemonAudit: with --audit the node agent attaches the call probes to
// the processes it traces and says, like tracer trace --audit, each HTTP
// call made with no deadline (deadline_missing, with its target) and each
// one still waiting after --hang-after (hung_call), and counts them in
// /metrics.
func TestDaemonAudit(t *testing.T) {
	requireGoTracing(t)
	lab := testprog.Path(t, "labapp")
	srv := exec.Command(lab, "http-server", "-addr", "127.0.0.1:0", "-delay", "1500ms")
	sout, _ := srv.StdoutPipe()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	sbr := bufio.NewReader(sout)
	line, err := sbr.ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) < 3 || f[0] != "ready" {
		t.Fatalf("server not ready: %q %v", line, err)
	}
	go io.Copy(io.Discard, sbr)
	addr := f[2]

	prog, name := uniqueCopy(t, "labapp", "ttaudit")
	d := startDaemon(t, nil, "--include-exe", name, "--audit", "--hang-after", "500ms", "--detail", "never")
	d.waitFor("node agent ready", func() bool { return d.logged("node agent ready", 0) })
	cl := startProg(t, prog, "", "client", "-proto", "http", "-target", addr, "-n", "2", "-concurrency", "1",
		"-timeout", "0", "-span", "before", "-wait")
	d.waitFor("the client traced", func() bool { return d.logged("tracing process", cl.pid()) })
	cl.run()
	kinds := func() (missing, hung int) {
		for _, l := range d.other {
			var m export.HungJSON
			if json.Unmarshal([]byte(l), &m) != nil || int(m.PID) != cl.pid() {
				continue
			}
			switch m.Kind {
			case "deadline_missing":
				if strings.HasSuffix(m.Target, addr[strings.LastIndex(addr, ":"):]) {
					missing++
				}
			case "hung_call":
				hung++
			}
		}
		return
	}
	d.waitFor("two deadline_missing and two hung_call lines", func() bool { m, h := kinds(); return m >= 2 && h >= 2 })
	if err := cl.cmd.Wait(); err != nil {
		t.Fatalf("client: %v", err)
	}
	_, metrics := httpGet(t, "http://"+d.addr()+"/metrics")
	var counted bool
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "timeout_tracer_calls_without_deadline_total{") && !strings.HasSuffix(l, " 0") {
			counted = true
		}
	}
	if !counted {
		t.Errorf("no calls_without_deadline_total in /metrics:\n%s", metrics)
	}
}
