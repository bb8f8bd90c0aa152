package bench

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/lab/testprog"
)

// BenchmarkDaemonMemory: the node agent's resident memory with 50 traced
// processes of 20 distinct executables, the large ones among them (jaeger
// and helm from `make deps`, and Kubernetes' own binaries when
// lab/k8s/build-bins.sh has built them: 60–120 MB each), then over rounds
// of process churn (10 processes replaced each round). Every process is
// stopped (SIGSTOP) right after its exec: the agent analyses and attaches
// to it as to any Go process, and what it costs is the agent's whatever
// the program does. Prints RSS against traced processes and executables,
// the peak (VmHWM), and RSS after each churn round.
func BenchmarkDaemonMemory(b *testing.B) {
	requireTracing(b)
	const procs, exes, rounds, churn = 50, 20, 5, 10
	dir := b.TempDir()
	os.Chmod(dir, 0o755)
	tag := fmt.Sprintf("ttmem%d", os.Getpid())

	// The executables: large real programs first, then the lab's, then
	// copies of the lab's with a trailer of their own (another file,
	// analysed on its own) up to 20.
	var large []string
	gopath := strings.TrimSpace(goEnv(b, "GOPATH"))
	large = append(large, filepath.Join(gopath, "bin", "jaeger"), filepath.Join(gopath, "bin", "helm"))
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kubelet", "kube-scheduler", "kubectl", "etcd"} {
		if k8s, _ := filepath.Glob(filepath.Join(gopath, "bin", "tt-k8s-v*", name)); len(k8s) > 0 {
			large = append(large, k8s[0])
		}
	}
	var paths []string
	var sizes []int64
	add := func(src string, data []byte) {
		name := fmt.Sprintf("%s-%02d-%s", tag, len(paths), filepath.Base(src))
		dst := filepath.Join(dir, name)
		if err := os.WriteFile(dst, data, 0o755); err != nil {
			b.Fatal(err)
		}
		paths = append(paths, dst)
		sizes = append(sizes, int64(len(data)))
	}
	for _, p := range large {
		if data, err := os.ReadFile(p); err == nil && len(paths) < exes {
			add(p, data)
		}
	}
	if len(paths) == 0 {
		b.Logf("no large Go program found (jaeger and helm come with make deps): the executables are the lab's")
	}
	var lab []string
	for _, name := range []string{"httpload", "labapp", "ctxstorm", "connstorm", "deadlines", "pingpong", "tcpclient", "tcpsink"} {
		lab = append(lab, testprog.Path(b, name))
	}
	for i := 0; len(paths) < exes; i++ {
		src := lab[i%len(lab)]
		data, err := os.ReadFile(src)
		if err != nil {
			b.Fatal(err)
		}
		if i >= len(lab) { // another file with the same program
			data = append(data, []byte(fmt.Sprintf("\x00tt-copy-%d", i))...)
		}
		add(src, data)
	}

	d := exec.Command(testprog.Tracer(b), "daemon", "--log-format", "json", "-o", "none", "--metrics-addr", "", "--include-exe", strings.Join(baseNames(paths), ","))
	stderr, _ := d.StderrPipe()
	if err := d.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Process.Kill(); d.Wait() })
	log := &agentLog{attached: map[int]time.Duration{}}
	go log.read(stderr)
	time.Sleep(2 * time.Second)
	rssIdle := procRSS(d.Process.Pid)

	running := map[int]*exec.Cmd{}
	start := func(exe string) int {
		for try := 0; ; try++ {
			cmd := exec.Command(exe)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			cmd.Process.Signal(syscall.SIGSTOP)
			var ws syscall.WaitStatus
			// Stopped, not exited (a program that fails on no arguments
			// may be gone before the signal: started again).
			if wpid, err := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WUNTRACED, nil); err == nil && wpid == cmd.Process.Pid && ws.Stopped() {
				running[cmd.Process.Pid] = cmd
				return cmd.Process.Pid
			}
			if try == 5 {
				b.Fatalf("%s does not stay up long enough to be stopped", exe)
			}
		}
	}
	stop := func(pid int) {
		cmd := running[pid]
		cmd.Process.Kill()
		syscall.Wait4(pid, nil, 0, nil)
		delete(running, pid)
	}
	b.Cleanup(func() {
		for pid := range running {
			stop(pid)
		}
	})
	var pids []int
	owner := map[int]string{}
	for i := 0; i < procs; i++ {
		exe := paths[i%len(paths)]
		pid := start(exe)
		pids = append(pids, pid)
		owner[pid] = exe
	}
	log.wait(b, pids)
	time.Sleep(3 * time.Second) // the agent's scavenging after a burst
	rssLoaded, peak := procRSS(d.Process.Pid), procHWM(d.Process.Pid)

	rng := rand.New(rand.NewPCG(1, 2))
	var after []int64
	for r := 0; r < rounds; r++ {
		var fresh []int
		for _, i := range rng.Perm(len(pids))[:churn] {
			exe := owner[pids[i]]
			stop(pids[i])
			pid := start(exe)
			owner[pid] = exe
			pids[i] = pid
			fresh = append(fresh, pid)
		}
		log.wait(b, fresh)
		time.Sleep(2 * time.Second)
		after = append(after, procRSS(d.Process.Pid))
	}
	peakChurn := procHWM(d.Process.Pid)

	sort.Slice(sizes, func(i, j int) bool { return sizes[i] > sizes[j] })
	mib := func(v int64) string { return fmt.Sprintf("%.1f", float64(v)/(1<<20)) }
	var churnRSS []string
	for _, v := range after {
		churnRSS = append(churnRSS, mib(v))
	}
	fmt.Printf("\nnode agent memory, %d traced processes of %d executables (largest %s, %s, %s MB):\n", procs, len(paths),
		mib(sizes[0]), mib(sizes[1]), mib(sizes[2]))
	fmt.Printf("  agent RSS            %s MiB idle, %s MiB with %d processes (target ≤ 128)\n", mib(rssIdle), mib(rssLoaded), procs)
	fmt.Printf("  agent peak (VmHWM)   %s MiB while attaching; %s MiB after churn\n", mib(peak), mib(peakChurn))
	fmt.Printf("  churn                RSS after each of %d rounds of %d processes replaced: %s MiB\n", rounds, churn, strings.Join(churnRSS, ", "))
	b.ReportMetric(float64(rssLoaded)/(1<<20), "agent-rss-MiB")
	b.ReportMetric(float64(peakChurn)/(1<<20), "agent-peak-MiB")
	b.ReportMetric(float64(after[len(after)-1]-rssLoaded)/(1<<20), "churn-growth-MiB")
}

// procHWM is a process's peak resident set size.
func procHWM(pid int) int64 { return statusBytes(fmt.Sprintf("/proc/%d/status", pid), "VmHWM:") }

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}

func goEnv(b *testing.B, key string) string {
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		b.Fatalf("go env %s: %v", key, err)
	}
	return string(bytes.TrimSpace(out))
}
