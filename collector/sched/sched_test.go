package sched

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/gobin"
	"github.com/timeout-tracer/tracer/lab/testenv"
	"github.com/timeout-tracer/tracer/lab/testprog"
)

// startBurner runs a shell busy loop pinned to CPU 0.
// requireTracing is the one skip helper of the kernel tests.
func requireTracing(t *testing.T) {
	t.Helper()
	testenv.Root(t)
	if err := collector.Preflight(); err != nil {
		t.Skipf("kernel tracing unavailable: %v", err)
	}
}

func startBurner(t *testing.T) *exec.Cmd {
	t.Helper()
	c := exec.Command("taskset", "-c", "0", "sh", "-c", "while :; do :; done")
	if err := c.Start(); err != nil {
		t.Skipf("taskset: %v", err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c
}

// Three CPU-bound processes pinned to one CPU: each runs about a third of
// the time, so the traced one waits for the CPU about two thirds of it.
// The scheduler hooks say so; detached, they say nothing.
func TestSchedRunqueueOfPinnedBurners(t *testing.T) {
	for _, raw := range []bool{false, true} {
		name := map[bool]string{false: "tp_btf", true: "raw_tp"}[raw]
		t.Run(name, func(t *testing.T) {
			requireTracing(t)
			traced := startBurner(t)
			startBurner(t)
			startBurner(t)
			s, err := Start(Config{Interval: 100 * time.Millisecond, ForceRawTP: raw})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			pid := uint32(traced.Process.Pid)
			if err := s.Trace(pid); err != nil {
				t.Fatal(err)
			}
			if err := s.SetRunqueue(true); err != nil {
				t.Fatal(err)
			}
			// The share is the scheduler's, on a machine other work shares:
			// a measurement out of bounds is taken once more before failing.
			var share float64
			for attempt := 1; attempt <= 2; attempt++ {
				var lost, span time.Duration
				var n int
				timeout := time.After(10 * time.Second)
				for n < 10 {
					select {
					case ev := <-s.Events():
						if ev.Kind != event.LocalRunqueue || ev.PID != pid {
							t.Fatalf("unexpected event %+v", ev)
						}
						if ev.Mono == ev.Start {
							continue // the baseline
						}
						lost += ev.Lost
						span += time.Duration(ev.Mono - ev.Start)
						n++
					case <-timeout:
						t.Fatalf("%d intervals in 10 s", n)
					}
				}
				st, _ := s.Stats()
				share = float64(lost) / float64(span)
				t.Logf("attempt %d: waited %v of %v (%.0f %%) over %d intervals; %+v", attempt, lost, span, 100*share, n, st)
				if share >= 0.4 && share <= 0.95 {
					break
				}
			}
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if share < 0.4 || share > 0.95 {
				t.Errorf("run-queue share %.2f, want about 2/3", share)
			}
			if st.RunqueueHooks != name || st.Matched == 0 || st.Hits < st.Matched {
				t.Errorf("stats %+v", st)
			}
			if err := s.SetRunqueue(false); err != nil {
				t.Fatal(err)
			}
			before, _ := s.Stats()
			time.Sleep(300 * time.Millisecond)
			after, _ := s.Stats()
			if after.Hits != before.Hits {
				t.Errorf("hooks ran %d times while detached", after.Hits-before.Hits)
			}
		})
	}
}

// A Go program that collects garbage all the time: each stop-the-world
// comes out as one pause, with a plausible length.
func TestSchedGCPauses(t *testing.T) {
	requireTracing(t)
	lab := testprog.Path(t, "labapp")
	// A client with no server to call: each request allocates, then fails
	// to connect at once; GOGC=5 over a 64 MiB ballast keeps the GC busy.
	c := exec.Command(lab, "client", "-target", "127.0.0.1:1", "-n", "1000000", "-timeout", "0",
		"-span", "none", "-ballast-mb", "64", "-garbage-kb", "512", "-wait")
	c.Env = append(c.Environ(), "GOGC=5")
	stdin, _ := c.StdinPipe()
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("labapp not ready: %q %v", line, err)
	}
	go func() { // drain its lines
		sc := bufio.NewScanner(out)
		for sc.Scan() {
		}
	}()
	bin, err := gobin.OpenPID(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	s, err := Start(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.TraceGC(uint32(c.Process.Pid), bin.AttachPath, bin); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	var n int
	var total time.Duration
	timeout := time.After(20 * time.Second)
	for n < 20 {
		select {
		case ev := <-s.Events():
			if ev.Kind != event.LocalGCPause || ev.PID != uint32(c.Process.Pid) || ev.Count != 1 {
				t.Fatalf("unexpected event %+v", ev)
			}
			if ev.Lost <= 0 || ev.Lost > time.Second || ev.Lost != time.Duration(ev.Mono-ev.Start) {
				t.Errorf("pause %+v", ev)
			}
			total += ev.Lost
			n++
		case <-timeout:
			t.Fatalf("%d pauses in 20 s", n)
		}
	}
	st, _ := s.Stats()
	t.Logf("%d pauses, mean %v; %+v", n, total/time.Duration(n), st)
	if st.GCHits < uint64(2*n) {
		t.Errorf("%d probe hits for %d pauses, want two per pause", st.GCHits, n)
	}
}
