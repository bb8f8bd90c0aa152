package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/collector/tcp"
	"github.com/timeout-tracer/tracer/gobin"
	"github.com/timeout-tracer/tracer/lab/netlab"
	"github.com/timeout-tracer/tracer/lab/testenv"
	"github.com/timeout-tracer/tracer/lab/testprog"
)

func requireTracing(b *testing.B) {
	b.Helper()
	testenv.Root(b)
	if err := collector.Preflight(); err != nil {
		b.Skipf("kernel tracing unavailable: %v", err)
	}
}

// BenchmarkTCPCollectorOverhead: loopback bulk TCP with and without the
// collector attached (all processes, worst case), alternated in one run.
// Reports throughput and CPU-per-byte ratios (B/A) next to the A/A spread.
// Target: throughput ratio >= 0.99.
func BenchmarkTCPCollectorOverhead(b *testing.B) {
	requireTracing(b)
	const rounds, each, chunk = 16, time.Second, 64 * 1024
	var offTP, onTP, offCPU, onCPU []float64
	for i := 0; i < rounds; i++ {
		// ABBA order: whichever runs second in a round does not always
		// inherit the other's warm (or cold) caches.
		var off, on bulk
		var err1, err2 error
		if i%2 == 0 {
			off, err1 = runBulk(each, chunk)
			on, _, err2 = bulkWithCollector(each, chunk, false)
		} else {
			on, _, err2 = bulkWithCollector(each, chunk, false)
			off, err1 = runBulk(each, chunk)
		}
		if err := errors.Join(err1, err2); err != nil {
			b.Fatal(err)
		}
		offTP, onTP = append(offTP, off.mbps()), append(onTP, on.mbps())
		offCPU, onCPU = append(offCPU, off.cpuPerMB()), append(onCPU, on.cpuPerMB())
	}
	// One more round with the kernel's run statistics on (they add a clock
	// read per run, so they stay off while throughput is measured).
	on, hs, err := bulkWithCollector(each, chunk, true)
	if err != nil {
		b.Fatal(err)
	}
	writes := float64(on.bytes) / chunk
	perRun := float64(hs.runtime.Nanoseconds()) / float64(hs.runs)
	perMB := float64(hs.runs) / (float64(on.bytes) / 1e6)
	ratio, noise := abRatio(offTP, onTP)
	cpuRatio, cpuNoise := abRatio(offCPU, onCPU)
	fmt.Fprintf(os.Stderr, "\nTCP collector overhead, loopback bulk, %d alternations of %v:\n", rounds, each)
	fmt.Fprintf(os.Stderr, "  throughput off %.0f MB/s, on %.0f MB/s: ratio %.3f (A/A spread %s) -> %s\n",
		median(offTP), median(onTP), ratio, pct(noise), verdict(ratio, noise, 0.99))
	fmt.Fprintf(os.Stderr, "  CPU per MB off %.0f µs, on %.0f µs: ratio %.3f (A/A spread %s)\n",
		median(offCPU)/1e3, median(onCPU)/1e3, cpuRatio, pct(cpuNoise))
	fmt.Fprintf(os.Stderr, "  send/recv hook runs: %.2f per 64 KiB write, %.0f ns each in BPF (kernel run stats; they include their own clock reads)\n",
		float64(hs.runs)/writes, perRun)
	fmt.Fprintf(os.Stderr, "  => BPF time per MB %.1f µs = %s of the CPU per MB without the collector (deterministic estimate; the throughput ratio is the noisy one)\n",
		perMB*perRun/1e3, pct(perMB*perRun/median(offCPU)))
	b.ReportMetric(perRun, "ns/hook-run")
	b.ReportMetric(ratio, "throughput-ratio")
	b.ReportMetric(cpuRatio, "cpu-per-byte-ratio")
	b.ReportMetric(noise, "aa-spread")
}

type hookStats struct {
	runs    uint64
	runtime time.Duration
}

// bulkWithCollector runs one bulk transfer with the collector attached to
// every process; with runStats it also returns the send/recv hooks' kernel
// run statistics.
func bulkWithCollector(d time.Duration, chunk int, runStats bool) (bulk, hookStats, error) {
	var hs hookStats
	if runStats {
		st, err := collector.EnableRunStats()
		if err != nil {
			return bulk{}, hs, fmt.Errorf("enable BPF run stats: %w", err)
		}
		defer st.Close()
	}
	c, err := tcp.Start(tcp.Config{})
	if err != nil {
		return bulk{}, hs, err
	}
	defer c.Close()
	go func() {
		for range c.Events() {
		}
	}()
	res, err := runBulk(d, chunk)
	if err != nil || !runStats {
		return res, hs, err
	}
	ps, err := c.ProgramStats()
	if err != nil {
		return res, hs, err
	}
	for _, tp := range []string{"sock_send_length", "sock_recv_length"} {
		hs.runs += ps[tp].Runs
		hs.runtime += ps[tp].Runtime
	}
	return res, hs, nil
}

// BenchmarkTCPEventStorm pushes as many events through the pipeline as this
// machine can make: refused connects in a tight loop (a reset and a failed
// connect each), plus bulk flows under 30% loss (retransmits). The traffic
// runs in other processes, so this process's CPU and RSS are the agent's.
// Prints events/s handled, lost events, agent CPU and RSS.
func BenchmarkTCPEventStorm(b *testing.B) {
	requireTracing(b)
	for _, burst := range []uint32{1 << 30, 64} {
		b.Run(fmt.Sprintf("rate_burst=%d", burst), func(b *testing.B) { storm(b, burst) })
	}
}

func storm(b *testing.B, burst uint32) {
	p := netlab.NewPair(b)
	const port, flows, dur = 8080, 8, 5 * time.Second
	srv := p.ServerCmd(b.Context(), testprog.Path(b, "tcpsink"), "-addr", fmt.Sprintf(":%d", port))
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer srv.Wait()
	defer srv.Process.Kill()
	time.Sleep(300 * time.Millisecond)
	if err := p.Loss(port, 0.3); err != nil {
		b.Fatal(err)
	}
	c, err := tcp.Start(tcp.Config{RateBurst: burst})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var handled atomic.Uint64
	done := make(chan struct{})
	go func() {
		for range c.Events() {
			handled.Add(1)
		}
		close(done)
	}()
	client, storm := testprog.Path(b, "tcpclient"), testprog.Path(b, "connstorm")
	cpu0, t0 := cpuTime(), time.Now()
	var cmds []*exec.Cmd
	for i := 0; i < flows; i++ {
		cmds = append(cmds, p.ClientCmd(b.Context(), client, "-addr", fmt.Sprintf("%s:%d", p.ServerAddr, port),
			"-size", "65536", "-every", "0s", "-duration", dur.String()))
	}
	cmds = append(cmds, p.ClientCmd(b.Context(), storm, "-addr", fmt.Sprintf("%s:9", p.ServerAddr), "-workers", "16", "-duration", dur.String()))
	for _, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
	}
	for _, cmd := range cmds {
		cmd.Wait()
	}
	wall := time.Since(t0)
	s, _ := c.Stats()
	cpu := cpuTime() - cpu0
	rss := rssBytes()
	// Closed sockets still retransmit their FINs: wait until everything
	// emitted up to the snapshot has been handled, then detach.
	for t := time.Now(); handled.Load() < s.Emitted && time.Since(t) < 5*time.Second; {
		time.Sleep(10 * time.Millisecond)
	}
	n := handled.Load()
	c.Close()
	<-done
	fmt.Fprintf(os.Stderr, "\nevent storm (%d lossy flows + refused-connect loop, %v, rate burst %d/s/socket):\n", flows, dur, burst)
	fmt.Fprintf(os.Stderr, "  kernel emitted %d (%.0f/s), handled %d, lost %d (ring buffer full), rate-limited %d, decode errors %d\n",
		s.Emitted, float64(s.Emitted)/wall.Seconds(), n, s.Lost, s.RateLimited, s.DecodeErrors)
	fmt.Fprintf(os.Stderr, "  agent CPU %.1f%% of one core (%.2f µs per event handled), RSS %.1f MiB\n",
		100*cpu.Seconds()/wall.Seconds(), float64(cpu.Microseconds())/float64(max(n, 1)), float64(rss)/(1<<20))
	if n+s.DecodeErrors < s.Emitted {
		b.Errorf("emitted %d but handled %d: events vanished without being counted", s.Emitted, n)
	}
	b.ReportMetric(float64(n)/wall.Seconds(), "events/s")
	b.ReportMetric(float64(s.Lost), "lost")
	b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
}

// BenchmarkTCPHookCost isolates what the always-on send/receive hooks cost
// a traced process per system call: the pingpong program writes a byte on
// one end of a loopback TCP connection and reads it at the other (the data
// is there already: no parking, no scheduler), so an iteration is one
// sock_send_length run and, with the goroutine binding of the detail tier
// (which attaches the receive hook), one sock_recv_length run. Rounds
// alternate the collector off and on (filtered to that process, as
// `tracer trace` runs it), ABBA; the difference in CPU per iteration,
// divided by the hook runs per iteration, is the cost of one hook run in
// the process's context. The collector runs here, the
// traced loop in its own process, as in real use (in one process, the
// collector's reader parked in the netpoller made the Go scheduler wake a
// thread on every loopback write: a cost of the benchmark, not the hooks).
func BenchmarkTCPHookCost(b *testing.B) {
	requireTracing(b)
	for _, mode := range []struct {
		name string
		goid bool
	}{{"owner only", false}, {"goroutine binding", true}} {
		b.Run(mode.name, func(b *testing.B) {
			p := startLoad(b, "pingpong")
			pid := p.cmd.Process.Pid
			bin, err := gobin.Open(p.cmd.Path)
			if err != nil {
				b.Fatal(err)
			}
			goidOff, err := bin.FieldOffset("runtime.g", "goid")
			bin.Close()
			if err != nil {
				b.Fatal(err)
			}
			const each = 700 * time.Millisecond
			var hits, emitted, iters uint64
			on := func() float64 {
				c, err := tcp.Start(tcp.Config{PID: uint32(pid), ActivityInterval: time.Second, Lifecycle: true})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				if mode.goid {
					if err := c.RegisterGoProcess(uint32(pid), uint32(goidOff)); err != nil {
						b.Fatal(err)
					}
				}
				go func() {
					for range c.Events() {
					}
				}()
				s0, _ := c.Stats()
				n, ns := p.run(b, each)
				s1, _ := c.Stats()
				hits += s1.OwnerHits - s0.OwnerHits
				emitted += s1.Emitted - s0.Emitted
				iters += uint64(n)
				return ns
			}
			off := func() float64 { _, ns := p.run(b, each); return ns }
			off() // warm up
			const rounds = 12
			var offNs, onNs []float64
			for i := 0; i < rounds; i++ {
				if i%2 == 0 {
					offNs = append(offNs, off())
					onNs = append(onNs, on())
				} else {
					onNs = append(onNs, on())
					offNs = append(offNs, off())
				}
			}
			ratio, noise := abRatio(offNs, onNs)
			// Owner only: the receive hook is attached with goroutine
			// binding alone (tcp.Config.ReceiveAlways), one run per
			// iteration; with binding, two.
			perIter := float64(hits) / float64(max(iters, 1))
			perHook := (median(onNs) - median(offNs)) / max(perIter, 1)
			fmt.Fprintf(os.Stderr, "\nsend/receive hooks (%s), 1-byte write+read on loopback, %d rounds ABBA of %v:\n", mode.name, rounds, each)
			fmt.Fprintf(os.Stderr, "  CPU per write+read off %.0f ns, on %.0f ns: ratio %.3f (A/A spread %s)\n", median(offNs), median(onNs), ratio, pct(noise))
			fmt.Fprintf(os.Stderr, "  hook runs per iteration %.2f, events emitted per iteration %.5f => %.0f ns per hook run\n",
				perIter, float64(emitted)/float64(iters), perHook)
			b.ReportMetric(perHook, "ns/hook-run")
		})
	}
}
