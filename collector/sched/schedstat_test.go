package sched

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/lab/testenv"
)

// TestMain runs the wake-heavy workload when re-executed as its child.
func TestMain(m *testing.M) {
	if os.Getenv("TT_SCHED_WAKER") == "1" {
		waker()
		return
	}
	os.Exit(m.Run())
}

// waker: goroutine pairs handing a token back and forth around short
// sleeps, with a little work between: the runtime's threads are woken,
// park in futexes and epoll, and spin, all the time (the pattern of a Go
// service waiting on its network).
func waker() {
	for i := 0; i < 8; i++ {
		go func() {
			a, b := make(chan int), make(chan int)
			go func() {
				for v := range a {
					time.Sleep(200 * time.Microsecond)
					b <- v
				}
			}()
			for {
				a <- 1
				<-b
				x := 0
				for j := 0; j < 20000; j++ {
					x += j
				}
				_ = x
				runtime.Gosched()
			}
		}()
	}
	select {}
}

// kernelRunDelay sums the run_delay (ns runnable without a CPU) and the
// timeslices of every thread of pid, from the scheduler's own accounting.
func kernelRunDelay(pid int) (delay time.Duration, slices int64) {
	for _, st := range testenv.Schedstats(pid) {
		delay += st.RunDelay
		slices += st.Slices
	}
	return delay, slices
}

func (s *Collector) rawSums(pid uint32) (wait time.Duration, waits uint64) {
	var perCPU []schedTtRqSum
	if err := s.maps.RqSums.Lookup(pid, &perCPU); err != nil {
		return 0, 0
	}
	for _, v := range perCPU {
		wait += time.Duration(v.WaitNs)
		waits += v.Waits
	}
	return wait, waits
}

// The hooks' run-queue sums are the scheduler's own: against the run_delay
// of /proc/PID/task/*/schedstat of a wake-heavy Go program, attached while
// it runs (the adaptive switch-on), right after the attachment and later.
// Before the hooks started together, the first waits after a switch-on
// counted the threads' runs and sleeps while only sched_wakeup watched:
// 773 ms of waits in the first 1.4 ms, where the kernel counted 62 us.
func TestSchedRunqueueMatchesSchedstat(t *testing.T) {
	for _, raw := range []bool{false, true} {
		name := map[bool]string{false: "tp_btf", true: "raw_tp"}[raw]
		t.Run(name, func(t *testing.T) {
			requireTracing(t)
			c := exec.Command(os.Args[0], "-test.run=^$")
			c.Env = append(os.Environ(), "TT_SCHED_WAKER=1")
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { c.Process.Kill(); c.Wait() }()
			time.Sleep(200 * time.Millisecond)
			s, err := Start(Config{Interval: time.Hour, ForceRawTP: raw}) // no reader: the sums are read here
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			pid := uint32(c.Process.Pid)
			if err := s.Trace(pid); err != nil {
				t.Fatal(err)
			}
			// Twice: a switch-on, and one after a detach (the LRU then
			// holds the starts of the first attachment).
			for round := 1; round <= 2; round++ {
				if err := s.SetRunqueue(true); err != nil {
					t.Fatal(err)
				}
				// The kernel's sums are read before and after the hooks'
				// (a wait that ends between two readings counts in one
				// only: under load one wait can be tens of ms), so the
				// hooks' growth must lie between the kernel's least and
				// most, with 20 % + 5 ms of slack (a wait under way at the
				// attachment is void for the hooks only).
				read := func() (ka time.Duration, w time.Duration, n uint64, kb time.Duration, sl int64) {
					ka, _ = kernelRunDelay(c.Process.Pid)
					w, n = s.rawSums(pid)
					kb, sl = kernelRunDelay(c.Process.Pid)
					return
				}
				k0a, w0, n0, k0b, sl0 := read()
				for _, after := range []time.Duration{100 * time.Millisecond, time.Second} {
					time.Sleep(after)
					ka, w, n, kb, sl := read()
					bw, lo, hi := w-w0, ka-k0b, kb-k0a
					t.Logf("round %d, %v after the attachment: hooks %v in %d waits, kernel %v..%v in %d timeslices", round, after, bw, n-n0, lo, hi, sl-sl0)
					if bw > hi+hi/5+5*time.Millisecond || bw+bw/5+5*time.Millisecond < lo {
						t.Errorf("round %d: the hooks summed %v of run-queue time, the kernel %v to %v", round, bw, lo, hi)
					}
				}
				if err := s.SetRunqueue(false); err != nil {
					t.Fatal(err)
				}
				time.Sleep(300 * time.Millisecond)
			}
		})
	}
}
