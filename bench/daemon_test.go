package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/lab/testprog"
)

// procCPU is a process's user+system time, from /proc/PID/stat.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// procRSS is a process's resident set size.
func procRSS(pid int) int64 { return statusBytes(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:") }

// agentLog collects the daemon's "tracing process" lines: pid -> time
// from its exec to its probes attached.
type agentLog struct {
	mu       sync.Mutex
	attached map[int]time.Duration
	lines    []string // the rest, for a failure's message (the last 20,000)
}

func (l *agentLog) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m struct {
			Msg       string  `json:"msg"`
			PID       int     `json:"pid"`
			SinceExec float64 `json:"since_exec"` // slog JSON: nanoseconds
		}
		l.mu.Lock()
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Msg == "tracing process" {
			l.attached[m.PID] = time.Duration(m.SinceExec)
		} else {
			if len(l.lines) >= 20000 {
				l.lines = l.lines[1:]
			}
			l.lines = append(l.lines, sc.Text())
		}
		l.mu.Unlock()
	}
}

func (l *agentLog) wait(b *testing.B, pids []int) []time.Duration {
	limit := time.Now().Add(2 * time.Minute)
	for {
		l.mu.Lock()
		var got []time.Duration
		var missing []int
		for _, p := range pids {
			if d, ok := l.attached[p]; ok {
				got = append(got, d)
			} else {
				missing = append(missing, p)
			}
		}
		var said []string
		for _, line := range l.lines {
			for _, p := range missing {
				if strings.Contains(line, fmt.Sprintf(`"pid":%d,`, p)) || strings.Contains(line, `"level":"ERROR"`) {
					said = append(said, line)
					break
				}
			}
		}
		l.mu.Unlock()
		if len(got) == len(pids) {
			return got
		}
		if time.Now().After(limit) {
			for _, p := range missing {
				exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p))
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
				said = append(said, fmt.Sprintf("pid %d: exe %s (%v), stat %.80s", p, exe, err, st))
			}
			b.Fatalf("the daemon attached %d of %d processes in 2 minutes; not %v; it said of them:\n%s", len(got), len(pids), missing, strings.Join(said, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1))]
}

// BenchmarkDaemon: the node agent with 50 traced Go processes under steady
// traffic (each an HTTP client and server at 20 requests/s, every request
// under a deadline that is met): the agent's CPU and RSS, and the time from
// a process's exec to its probes attached — for 50 processes started at
// once, and for one started alone.
func BenchmarkDaemon(b *testing.B) {
	requireTracing(b)
	const procs, rate = 50, 20
	src := testprog.Path(b, "httpload")
	dir := b.TempDir()
	os.Chmod(dir, 0o755)
	name := fmt.Sprintf("ttload%d", os.Getpid())
	prog := filepath.Join(dir, name)
	data, err := os.ReadFile(src)
	if err != nil {
		b.Fatal(err)
	}
	os.WriteFile(prog, data, 0o755)

	d := exec.Command(testprog.Tracer(b), "daemon", "--log-format", "json", "-o", "none", "--metrics-addr", "", "--include-exe", name)
	stderr, _ := d.StderrPipe()
	if err := d.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Process.Kill(); d.Wait() })
	log := &agentLog{attached: map[int]time.Duration{}}
	go log.read(stderr)
	time.Sleep(2 * time.Second) // loaded and scanned: the idle baseline
	rssIdle := procRSS(d.Process.Pid)

	var loads []*loadProc
	var pids []int
	for i := 0; i < procs; i++ {
		cmd := exec.Command(prog, "-workers", "1", "-rate", strconv.Itoa(rate))
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		p := &loadProc{cmd: cmd, in: in, out: bufio.NewReader(out)}
		if line, err := p.out.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
			b.Fatalf("httpload not ready: %q %v", line, err)
		}
		loads = append(loads, p)
		pids = append(pids, cmd.Process.Pid)
	}
	burst := log.wait(b, pids)

	const window = 10 * time.Second
	cpu0 := procCPU(d.Process.Pid)
	var wg sync.WaitGroup
	var reqs int64
	var mu sync.Mutex
	for _, p := range loads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprintf(p.in, "run %s\n", window)
			line, _ := p.out.ReadString('\n')
			var n, c int64
			fmt.Sscan(line, &n, &c)
			mu.Lock()
			reqs += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	cpu := procCPU(d.Process.Pid) - cpu0
	rssLoaded := procRSS(d.Process.Pid)

	// One process started alone, the agent otherwise idle.
	lone := exec.Command(prog, "-workers", "1")
	// Its stdin stays open: on end of input httpload exits, and a process
	// gone before the agent reaches it is never attached.
	loneIn, _ := lone.StdinPipe()
	b.Cleanup(func() { loneIn.Close() })
	if err := lone.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lone.Process.Kill(); lone.Wait() })
	loneAttach := log.wait(b, []int{lone.Process.Pid})[0]

	fmt.Printf("\nnode agent, %d traced processes, %d requests/s each (%d requests in %v):\n", procs, rate, reqs, window)
	fmt.Printf("  agent CPU            %.2f%% of one CPU (%v in %v)\n", 100*cpu.Seconds()/window.Seconds(), cpu, window)
	fmt.Printf("  agent RSS            %.1f MiB idle, %.1f MiB with %d processes\n", float64(rssIdle)/(1<<20), float64(rssLoaded)/(1<<20), procs)
	fmt.Printf("  exec -> attached     %d at once: p50 %v, p99 %v, max %v; one alone: %v\n", procs,
		quantile(burst, .5).Round(time.Millisecond), quantile(burst, .99).Round(time.Millisecond), quantile(burst, 1).Round(time.Millisecond), loneAttach.Round(time.Millisecond))
	b.ReportMetric(100*cpu.Seconds()/window.Seconds(), "agent-cpu-%")
	b.ReportMetric(float64(rssLoaded)/(1<<20), "agent-rss-MiB")
	b.ReportMetric(float64(loneAttach.Milliseconds()), "attach-ms")
}
