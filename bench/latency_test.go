package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/lab/testprog"
	"github.com/timeout-tracer/tracer/pipeline"
)

// BenchmarkReportLatency: how long after a deadline expires its report
// comes out of the pipeline — the correlator's grace window for late kernel
// events (250 ms), then as soon as every source's watermark has passed it
// (the merge asks quiet ring readers for their progress instead of waiting
// for their polls) — while the traced lab client runs 16 requests at a
// time against a server slower than their deadline (loopback), so
// expiries arrive in bursts with their kernel and binding events. Latency
// is measured from the expiry's own kernel timestamp (CLOCK_MONOTONIC in
// the BPF program) to the moment the report reaches the sink; p50 and p99
// are printed, per detail mode.
func BenchmarkReportLatency(b *testing.B) {
	requireTracing(b)
	for _, detail := range []string{"never", "always"} {
		b.Run("detail="+detail, func(b *testing.B) { reportLatency(b, detail) })
	}
}

func reportLatency(b *testing.B, detail string) {
	lab := testprog.Path(b, "labapp")
	srv := exec.Command(lab, "http-server", "-addr", "127.0.0.1:0", "-delay", "200ms")
	addr := startReady(b, srv)
	cl := exec.Command(lab, "client", "-proto", "http", "-target", addr, "-n", "800", "-concurrency", "16",
		"-timeout", "40ms", "-span", "before", "-wait")
	stdin, _ := cl.StdinPipe()
	startReady(b, cl)

	// The kernel's run statistics of the expiry probe (a clock read per
	// program run: this benchmark measures no CPU ratio).
	st, err := collector.EnableRunStats()
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	var lat []time.Duration
	p, err := pipeline.Start(pipeline.Config{PID: cl.Process.Pid, Detail: detail}, pipeline.Reports(func(r *correlate.Report) error {
		d := time.Duration(monoNow() - r.Deadline.Mono)
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
		return nil
	}))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	exited := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx, exited) }()

	b.ResetTimer()
	io.WriteString(stdin, "go\n")
	if err := cl.Wait(); err != nil {
		b.Fatalf("lab client: %v", err)
	}
	time.Sleep(time.Second) // the last reports leave the windows
	runs, runtime, err := p.Probes().ExpiryRunStats()
	if err != nil {
		b.Fatal(err)
	}
	cancel()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()

	mu.Lock()
	defer mu.Unlock()
	if len(lat) == 0 {
		b.Fatal("no report: the benchmark measured nothing")
	}
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	fmt.Fprintf(os.Stderr, "\nreport latency, expiry -> report (detail=%s, %d reports, 16 requests in flight): p50 %v, p99 %v, max %v\n",
		detail, len(lat), q(0.50).Round(time.Millisecond), q(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	fmt.Fprintf(os.Stderr, "  of which by design: the grace window %v (the merge waits on the sources' watermarks, no fixed hold)\n", correlate.DefaultConfig().Grace)
	if runs > 0 {
		// Each expiry of an HTTP request bound at the expiry: its
		// waiters, their stacks, the connection's cookie and receive side.
		fmt.Fprintf(os.Stderr, "  expiry probe in the kernel: %d runs, %.1f µs per expiry (go_timer_fired run time, kernel.bpf_stats_enabled)\n",
			runs, float64(runtime.Nanoseconds())/float64(runs)/1e3)
		b.ReportMetric(float64(runtime.Nanoseconds())/float64(runs)/1e3, "bpf-µs/expiry")
	}
	b.ReportMetric(float64(q(0.50).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(q(0.99).Milliseconds()), "p99-ms")
}

// startReady starts a lab process and waits for its "ready PID [ADDR]"
// line; it returns ADDR (empty when the line has none).
func startReady(b *testing.B, cmd *exec.Cmd) string {
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	br := bufio.NewReader(out)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		b.Fatalf("%s not ready: %q %v", cmd.Path, line, err)
	}
	go io.Copy(io.Discard, br) // the per-request lines: not needed here
	f := strings.Fields(line)
	if len(f) >= 3 {
		return f[2]
	}
	return ""
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
