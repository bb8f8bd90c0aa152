package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/timeout-tracer/tracer/collector/sched"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/gobin"
)

// localChecks: the scheduler tracepoints (tp_btf, then raw_tp forced) see
// this process's own threads wait for the CPU while three of them spin on
// the guest's one CPU; the stop-the-world uprobes, on this process's own
// binary, see the pauses of forced GCs.
func localChecks(out *reporter) {
	for _, raw := range []bool{false, true} {
		name := "sched_runqueue"
		if raw {
			name += "_raw_tp"
		}
		if out.wants(name) {
			msg, err := checkRunqueue(raw)
			out.check(name, err, msg)
		}
	}
	if out.wants("gc_pause") {
		msg, err := checkGCPause()
		out.check("gc_pause", err, msg)
	}
}

// spin keeps n locked threads busy for d.
func spin(n int, d time.Duration) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			x := 0
			for end := time.Now().Add(d); time.Now().Before(end); {
				x++
			}
			_ = x
		})
	}
	wg.Wait()
}

func checkRunqueue(raw bool) (string, error) {
	s, err := sched.Start(sched.Config{ForceRawTP: raw, Interval: 50 * time.Millisecond})
	if err != nil {
		return "", err
	}
	defer s.Close()
	pid := uint32(os.Getpid())
	if err := s.Trace(pid); err != nil {
		return "", err
	}
	if err := s.SetRunqueue(true); err != nil {
		return "", err
	}
	// Twice as many spinning threads as CPUs, and two more: each waits
	// for one most of the time. For a second: with NumCPU+2 threads for
	// half a second the figure (a mean over the process's threads, idle
	// ones included) came out 45–150 ms across runs; with this spin,
	// 43–229 ms. The check asks for 10 ms: a wait clearly seen (hooks
	// that do not work see none), not a figure the guest's scheduler
	// must reach (6.12 amd64 gave 43.5 ms against the 50 ms it asked
	// before, in CI).
	spin(2*runtime.NumCPU()+2, time.Second)
	time.Sleep(150 * time.Millisecond) // a read after the spin
	var lost time.Duration
	for drained := false; !drained; {
		select {
		case ev := <-s.Events():
			if ev.Kind == event.LocalRunqueue && ev.PID == pid {
				lost += ev.Lost
			}
		default:
			drained = true
		}
	}
	st, err := s.Stats()
	if err != nil {
		return "", err
	}
	msg := fmt.Sprintf("hooks %s, %d runs (%d ours), mean thread wait %v", st.RunqueueHooks, st.Hits, st.Matched, lost)
	want := "tp_btf"
	if raw {
		want = "raw_tp"
	}
	switch {
	case st.RunqueueHooks != want:
		return msg, fmt.Errorf("attached as %q, want %s", st.RunqueueHooks, want)
	case lost < 10*time.Millisecond:
		return msg, errors.New("no run-queue wait seen while threads outnumbered the CPUs")
	}
	return msg, nil
}

func checkGCPause() (string, error) {
	bin, err := gobin.OpenPID(os.Getpid())
	if err != nil {
		return "", err
	}
	defer bin.Close()
	s, err := sched.Start(sched.Config{})
	if err != nil {
		return "", err
	}
	defer s.Close()
	pid := uint32(os.Getpid())
	if err := s.TraceGC(pid, bin.AttachPath, bin); err != nil {
		return "", err
	}
	const gcs = 5
	for range gcs {
		runtime.GC() // two stop-the-world pauses each
	}
	var n int
	var total time.Duration
	for timeout := time.After(2 * time.Second); n < 2*gcs; {
		select {
		case ev := <-s.Events():
			if ev.Kind == event.LocalGCPause && ev.PID == pid {
				n++
				total += ev.Lost
			}
		case <-timeout:
			return fmt.Sprintf("%d pauses", n), fmt.Errorf("%d pauses for %d forced GCs, want %d", n, gcs, 2*gcs)
		}
	}
	return fmt.Sprintf("%d pauses, %v in all (%s)", n, total, bin.GoVersion), nil
}
