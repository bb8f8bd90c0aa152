package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/lab/testprog"
	"github.com/timeout-tracer/tracer/pipeline/storm"
)

// stormRSSBound is the tracer's memory bound under a context storm: its
// ring buffers, bounded queues and correlator caps, with room to spare.
const stormRSSBound = 200 << 20

var totalsRe = regexp.MustCompile(`totals: expiries seen (\d+), reported (\d+), lost (\d+) \(ring buffer full\), undecodable (\d+); kernel events lost (\d+); storm guard trips (\d+), detached ([^,]+), expiries not seen \(estimate\) (\d+)`)

// TestContextStorm: a process expiring deadlines as fast as it can (~10⁵/s
// unprobed here) under `tracer trace`. The storm guard must detach the
// probes (a trap each would cost the target more than a CPU), every
// expiry the probes saw must be reported or counted lost (the totals add
// up exactly), the tracer's RSS stays under its bound, and after the
// storm it recovers: every deadline of a calm phase is reported.
func TestContextStorm(t *testing.T) {
	requireGoTracing(t)
	tgt := exec.Command(testprog.Path(t, "ctxstorm"), "-storm", "5s", "-after", "6", "-every", "100ms")
	stdin, _ := tgt.StdinPipe()
	tout, _ := tgt.StdoutPipe()
	if err := tgt.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { tgt.Process.Kill(); tgt.Wait() }()
	tr := bufio.NewReader(tout)
	if line, err := tr.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("target not ready: %q %v", line, err)
	}

	cmd := exec.Command(testprog.Tracer(t), "trace", "--pid", strconv.Itoa(tgt.Process.Pid), "-o", "json",
		"--detail", "never", "--storm-cooldown", "1s")
	var stdout strings.Builder
	cmd.Stdout = &stdout
	errPipe, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var mu sync.Mutex
	var stderr []string
	attached, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		sc := bufio.NewScanner(errPipe)
		once := sync.Once{}
		for sc.Scan() {
			mu.Lock()
			stderr = append(stderr, sc.Text())
			mu.Unlock()
			if strings.HasPrefix(sc.Text(), "tracing pid") {
				once.Do(func() { close(attached) })
			}
		}
		once.Do(func() { close(attached) })
	}()
	<-attached
	peak := watchRSS(cmd.Process.Pid)

	stdin.Write([]byte("storm\n"))
	var st struct {
		Storm int64   `json:"storm"`
		Rate  float64 `json:"rate"`
	}
	if err := json.NewDecoder(strings.NewReader(mustLine(t, tr))).Decode(&st); err != nil {
		t.Fatal(err)
	}
	// Let the guard settle: it looks at the storm's last hits within two
	// of its intervals; the calm phase starts once the probes are back
	// (or the tracer is gone, which the checks below report).
	time.Sleep(3 * storm.Interval)
	for settled := false; !settled; {
		mu.Lock()
		settled = !strings.Contains(lastStormLine(stderr), "probes detached")
		mu.Unlock()
		select {
		case <-finished:
			settled = true
		case <-time.After(100 * time.Millisecond):
		}
	}
	calmFrom := time.Now()
	stdin.Write([]byte("calm\n"))
	var calm struct {
		Calm int `json:"calm"`
	}
	if err := json.NewDecoder(strings.NewReader(mustLine(t, tr))).Decode(&calm); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	tgt.Wait()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tracer: %v\n%s", err, strings.Join(stderr, "\n"))
	}
	rss := peak()

	mu.Lock()
	all := strings.Join(stderr, "\n")
	mu.Unlock()
	m := totalsRe.FindStringSubmatch(all)
	if m == nil {
		t.Fatalf("no totals line:\n%s", all)
	}
	n := func(i int) uint64 { v, _ := strconv.ParseUint(m[i], 10, 64); return v }
	seen, reported, lost, undecodable, trips := n(1), n(2), n(3), n(4), n(6)
	var reports, calmReports int
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var r export.TimeoutJSON
		if json.Unmarshal([]byte(line), &r) != nil || r.Kind != "timeout" {
			continue
		}
		reports++
		if at, err := time.Parse(time.RFC3339Nano, r.Time); err == nil && at.After(calmFrom) {
			calmReports++
		}
	}
	total := uint64(st.Storm) + uint64(calm.Calm)
	t.Logf("target: %d storm expiries (%.0f/s while traced), %d calm; tracer: seen %d, reported %d, lost %d, storm guard trips %d, detached %s, not seen (estimate) %s; peak RSS %.1f MiB",
		st.Storm, st.Rate, calm.Calm, seen, reported, lost, trips, m[7], m[8], float64(rss)/(1<<20))
	if trips == 0 {
		t.Errorf("%.0f expiries/s and the storm guard never tripped", st.Rate)
	}
	if seen != reported+lost+undecodable {
		t.Errorf("seen %d != reported %d + lost %d + undecodable %d: expiries vanished without being counted", seen, reported, lost, undecodable)
	}
	if uint64(reports) != reported {
		t.Errorf("%d reports printed, totals say %d", reports, reported)
	}
	if seen > total {
		t.Errorf("the probes saw %d expiries, the target made %d", seen, total)
	}
	if calmReports != calm.Calm {
		t.Errorf("after the storm %d of %d calm expiries reported: the tracer did not recover", calmReports, calm.Calm)
	}
	if rss == 0 || rss > stormRSSBound {
		t.Errorf("tracer peak RSS %d bytes, bound %d", rss, stormRSSBound)
	}
}

func mustLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("target output: %v", err)
	}
	return line
}

func lastStormLine(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "storm guard:") {
			return lines[i]
		}
	}
	return ""
}

// watchRSS samples a process's resident set every 50 ms until the
// returned function is called, which gives the peak (VmHWM when it can
// still be read, else the highest sample).
func watchRSS(pid int) (peak func() int64) {
	var mu sync.Mutex
	var max int64
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, key := range []string{"VmHWM:", "VmRSS:"} {
				if v := procStatus(pid, key); v > 0 {
					mu.Lock()
					max = maxInt(max, v)
					mu.Unlock()
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		mu.Lock()
		defer mu.Unlock()
		return max
	}
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func procStatus(pid int, key string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestStormShedsDetailFirst: a busy client (hundreds of requests a second,
// a sixth of them timing out) with the detail tier on traps 13-20 times
// per request, far over the guard's limit, while its expiries alone are
// well within it. The guard must shed the detail tier only: the cold tier
// stays and every timeout the client logged is reported (before, every
// probe came off: 80 timeouts logged, 10 reported).
func TestStormShedsDetailFirst(t *testing.T) {
	requireGoTracing(t)
	server := []string{"http-server", "-addr", ":8080", "-delay-jitter", "60ms"}
	client := []string{"client", "-proto", "http", "-target", labTarget, "-n", "1500", "-concurrency", "16", "-timeout", "50ms", "-span", "before"}
	run := runLabCmd(t, server, client, false, nil, []string{"trace", "--pid", "PID", "-o", "json", "--detail", "always",
		"--storm-max-hits", "2000", "--storm-cooldown", "2s"})
	expired := 0
	for _, l := range run.client {
		if l.Outcome == "deadline_exceeded" {
			expired++
		}
	}
	if expired < 50 {
		t.Fatalf("%d requests timed out, want a sixth of 1500: %s", expired, run.stderr)
	}
	if !strings.Contains(run.stderr, "detail and call probes detached (cold tier kept)") {
		t.Errorf("the guard never shed the detail tier:\n%s", run.stderr)
	}
	if strings.Contains(run.stderr, "storm guard: probes detached") {
		t.Errorf("the guard took the cold tier off, with the expiries alone under its limit:\n%s", run.stderr)
	}
	t.Logf("%d timeouts logged, %d reported", expired, len(run.reports))
	if len(run.reports) < expired {
		t.Errorf("%d timeouts logged, %d reported", expired, len(run.reports))
	}
	m := totalsRe.FindStringSubmatch(run.stderr)
	if m == nil {
		t.Fatalf("no totals line: %s", run.stderr)
	}
	if m[6] != "0" {
		t.Errorf("storm guard trips %s, want 0 (sheds only)", m[6])
	}
}
