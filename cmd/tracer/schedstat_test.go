package main

import (
	"sync"
	"time"

	"github.com/timeout-tracer/tracer/lab/testenv"
	"github.com/timeout-tracer/tracer/tick"
)

// The kernel's own account of a lab client's run-queue time, to score the
// tracer's: /proc/PID/task/TID/schedstat holds each thread's cumulative
// run_delay (ns spent runnable, waiting for a CPU) and its count of
// timeslices. Sampled every 10 ms while the client runs, it gives the
// figure the tracer computes (per 100 ms interval, the summed wait over the
// threads that got a CPU, so a mean per thread; summed over the intervals
// of a window) from the scheduler's own bookkeeping instead of the BPF
// hooks. Measured against the hooks on a wake-heavy Go program: within 3 %.

type schedSample struct {
	mono    uint64
	threads map[int]testenv.Schedstat
}

type schedSampler struct {
	mu      sync.Mutex
	samples []schedSample
	stop    chan struct{}
	done    chan struct{}
}

// sampleSchedstat samples pid until Stop.
func sampleSchedstat(pid int) *schedSampler {
	s := &schedSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			th := testenv.Schedstats(pid)
			s.mu.Lock()
			s.samples = append(s.samples, schedSample{mono: tick.Mono(), threads: th})
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-tk.C:
			}
		}
	}()
	return s
}

func (s *schedSampler) Stop() {
	if s == nil {
		return
	}
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// runqueueMs is the kernel's run-queue figure of [lo, hi] in ms, taken as
// the tracer takes it: per ~100 ms step, the run_delay summed over the
// threads and divided by the threads that ran, summed over the steps. ok
// is false when the samples do not cover the window.
func (s *schedSampler) runqueueMs(lo, hi uint64) (float64, bool) {
	if s == nil {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	first := -1
	for i, sm := range s.samples {
		if sm.mono <= lo {
			first = i
		}
	}
	if first < 0 || s.samples[len(s.samples)-1].mono < hi {
		return 0, false
	}
	const step = uint64(100 * time.Millisecond)
	var total float64
	for a := first; a < len(s.samples)-1 && s.samples[a].mono < hi; {
		b := a + 1
		for b < len(s.samples)-1 && s.samples[b].mono < s.samples[a].mono+step && s.samples[b].mono < hi {
			b++
		}
		var wait time.Duration
		threads := 0
		for tid, v := range s.samples[b].threads {
			u := s.samples[a].threads[tid] // zero for a thread born in the step
			if v.Slices > u.Slices {
				wait += v.RunDelay - u.RunDelay
				threads++
			}
		}
		if threads > 0 {
			total += float64(wait) / float64(threads) / 1e6
		}
		a = b
	}
	return total, true
}
