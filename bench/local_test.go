package bench

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/collector/sched"
	"github.com/timeout-tracer/tracer/gobin"
	"github.com/timeout-tracer/tracer/sample"
)

// BenchmarkLocalSuccessPath: the lab service (labapp load: otelhttp client
// and server in one process, at saturation, every timeout met) with the
// local-cause sources attached (B) and detached (A), alternated in one
// process. local=auto is what `tracer trace` keeps on while a process is
// healthy: the cgroup throttling sampler (file reads every 100 ms) and the
// stop-the-world uprobes (twice per GC pause). local=always adds the
// scheduler tracepoints, which run on every context switch and wakeup of
// the node while attached: their hits per request, and per second, are
// printed with the ratio. Target: ratio >= 0.98.
func BenchmarkLocalSuccessPath(b *testing.B) {
	requireTracing(b)
	for _, runqueue := range []bool{false, true} {
		name := map[bool]string{false: "local=auto(throttle+gc)", true: "local=always(+runqueue)"}[runqueue]
		b.Run(name, func(b *testing.B) { localSuccessPath(b, startLoad(b, "labapp", "load"), runqueue) })
	}
}

func localSuccessPath(b *testing.B, p *loadProc, runqueue bool) {
	const rounds, each = 10, 700 * time.Millisecond
	pid := p.cmd.Process.Pid
	bin, err := gobin.OpenPID(pid)
	if err != nil {
		b.Fatal(err)
	}
	defer bin.Close()
	p.run(b, 300*time.Millisecond) // warm up
	var offRPS, onRPS, offCPU, onCPU []float64
	var schedHits, matched, gcHits, pauses, reqsOn uint64
	var onTime time.Duration
	for i := 0; i < rounds; i++ {
		var a, bb int64
		var acpu, bcpu float64
		attachAndRun := func() {
			th, err := sample.StartThrottle(sample.ThrottleConfig{PID: pid})
			if err != nil {
				b.Fatal(err)
			}
			s, err := sched.Start(sched.Config{})
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				for range th.Events() {
				}
			}()
			done := make(chan uint64)
			go func() {
				var n uint64
				for ev := range s.Events() {
					if ev.Lost > 0 && ev.Mono > ev.Start && ev.Count == 1 {
						n++
					}
				}
				done <- n
			}()
			if err := s.Trace(uint32(pid)); err != nil {
				b.Fatal(err)
			}
			if err := s.TraceGC(uint32(pid), bin.AttachPath, bin); err != nil {
				b.Fatal(err)
			}
			if runqueue {
				if err := s.SetRunqueue(true); err != nil {
					b.Fatal(err)
				}
			}
			s0, _ := s.Stats()
			start := time.Now()
			bb, bcpu = p.run(b, each)
			onTime += time.Since(start)
			s1, _ := s.Stats()
			s.Close()
			th.Close()
			pauses += <-done
			schedHits += s1.Hits - s0.Hits
			matched += s1.Matched - s0.Matched
			gcHits += s1.GCHits - s0.GCHits
			reqsOn += uint64(bb)
		}
		if i%2 == 0 { // ABBA
			a, acpu = p.run(b, each)
			attachAndRun()
		} else {
			attachAndRun()
			a, acpu = p.run(b, each)
		}
		offRPS, onRPS = append(offRPS, float64(a)/each.Seconds()), append(onRPS, float64(bb)/each.Seconds())
		offCPU, onCPU = append(offCPU, acpu), append(onCPU, bcpu)
	}
	ratio, noise := abRatio(offRPS, onRPS)
	cpuRatio, cpuNoise := abRatio(offCPU, onCPU)
	fmt.Fprintf(os.Stderr, "\nLocal-cause sources on the success path (lab service at saturation, timeouts met), runqueue=%v, %d rounds ABBA:\n", runqueue, rounds)
	fmt.Fprintf(os.Stderr, "  requests/s off %.0f, on %.0f: ratio %.3f (A/A spread %s)\n", median(offRPS), median(onRPS), ratio, pct(noise))
	fmt.Fprintf(os.Stderr, "  CPU per request of the service off %.1f µs, on %.1f µs: ratio %.3f (A/A spread %s)\n", median(offCPU)/1e3, median(onCPU)/1e3, cpuRatio, pct(cpuNoise))
	fmt.Fprintf(os.Stderr, "  scheduler tracepoint hits per request: %.2f (%.0f/s on the node, %.1f%% of them the service's; ~0.35 µs each: %.2f ms of CPU per second)\n",
		float64(schedHits)/float64(reqsOn), float64(schedHits)/onTime.Seconds(), 100*float64(matched)/max(1, float64(schedHits)),
		float64(schedHits)/onTime.Seconds()*0.35e-3)
	fmt.Fprintf(os.Stderr, "  GC stop-the-world uprobe hits per request: %.4f (%d pauses seen)\n", float64(gcHits)/float64(reqsOn), pauses)
	fmt.Fprintf(os.Stderr, "  verdict (target 0.98): %s\n", verdict(ratio, noise, 0.98))
	b.ReportMetric(ratio, "throughput-ratio")
	b.ReportMetric(float64(schedHits)/float64(reqsOn), "sched-hits/req")
	b.ReportMetric(float64(gcHits)/float64(reqsOn), "gc-uprobe-hits/req")
}
