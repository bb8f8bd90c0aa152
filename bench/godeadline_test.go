package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/collector/sched"
	"github.com/timeout-tracer/tracer/collector/tcp"
	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/lab/testprog"
	"github.com/timeout-tracer/tracer/pipeline"
)

// loadProc drives an httpload process: one process for the whole run, so
// A and B rounds differ only by the probes.
type loadProc struct {
	cmd *exec.Cmd
	in  io.Writer
	out *bufio.Reader
}

func startLoad(b *testing.B, prog string, args ...string) *loadProc {
	cmd := exec.Command(testprog.Path(b, prog), append(args, "-workers", "8")...)
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &loadProc{cmd: cmd, in: in, out: bufio.NewReader(outp)}
	if line, err := p.out.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
		b.Fatalf("httpload not ready: %q %v", line, err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return p
}

// run asks for one load phase; it returns requests and CPU ns per request.
func (p *loadProc) run(b *testing.B, d time.Duration) (reqs int64, cpuPerReq float64) {
	fmt.Fprintf(p.in, "run %s\n", d)
	line, err := p.out.ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	var cpu int64
	if _, err := fmt.Sscan(line, &reqs, &cpu); err != nil || reqs == 0 {
		b.Fatalf("httpload said %q: %v", line, err)
	}
	return reqs, float64(cpu) / float64(reqs)
}

// BenchmarkGoDeadlineSuccessPath: an HTTP service at saturation whose
// per-request timeouts are all met, traced (B) and not (A), alternated in
// one process. Traced means the pipeline `tracer trace --pid` runs, whole:
// the Go deadline probes, the kernel TCP collector filtered to the process
// with its goroutine sampling, the local-cause sources, the correlator. CPU
// per request counts the service's and the agent's (this process) both.
// In --detail=auto with no timeouts only the cold tier is attached: the
// target is a ratio >= 0.98 and zero uprobe hits per request. With detail
// forced on, every request traps at WithDeadlineCause's entry and return
// (and more): the ratio and the cost per hit are printed.
//
// Two services: a plain net/http one, and the lab application's
// OpenTelemetry-instrumented one (otelhttp server and client, a span per
// request opened before its deadline).
func BenchmarkGoDeadlineSuccessPath(b *testing.B) {
	requireTracing(b)
	for _, svc := range []struct {
		name, prog string
		args       []string
	}{
		{"plain", "httpload", nil},
		{"otel", "labapp", []string{"load"}},
	} {
		for _, detail := range []bool{false, true} {
			name := svc.name + "/" + map[bool]string{false: "detail=auto(cold only)", true: "detail=always"}[detail]
			b.Run(name, func(b *testing.B) { successPath(b, svc.name, startLoad(b, svc.prog, svc.args...), detail) })
		}
	}
}

// phase is one measured load phase: requests, the service's CPU and the
// agent's (this process's) CPU.
type phase struct {
	reqs     int64
	svcCPU   float64 // ns per request
	agentCPU float64 // ns per request
}

func (p phase) cpu() float64 { return p.svcCPU + p.agentCPU }

func (p *loadProc) phase(b *testing.B, d time.Duration) phase {
	c0 := cpuTime()
	n, svc := p.run(b, d)
	return phase{reqs: n, svcCPU: svc, agentCPU: float64((cpuTime() - c0).Nanoseconds()) / float64(n)}
}

func successPath(b *testing.B, svc string, p *loadProc, detail bool) {
	const rounds, each = 10, 700 * time.Millisecond
	p.run(b, 300*time.Millisecond) // warm up: connections, caches
	pid := p.cmd.Process.Pid
	var offRPS, onRPS, offCPU, onCPU, offAgent, onAgent []float64
	var hits, gcHits, reqsOn uint64
	var byProbe hitCounts
	mode := map[bool]string{false: "auto", true: "always"}[detail]
	traced := func(runStats bool) (phase, map[string]tcp.ProgramStat) {
		var st io.Closer
		if runStats {
			var err error
			if st, err = collector.EnableRunStats(); err != nil {
				b.Fatal(err)
			}
		}
		pl, err := pipeline.Start(pipeline.Config{PID: pid, Detail: mode, Local: pipeline.LocalConfig{Mode: "auto"}},
			pipeline.Reports(func(*correlate.Report) error { return nil })) // with a report sink, as `tracer trace`: the correlator runs
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- pl.Run(ctx, nil) }()
		time.Sleep(50 * time.Millisecond) // the detail switch and the readers settle
		s0, _ := pl.Probes().Stats()
		var g0 sched.Stats
		if sc := pl.Sched(); sc != nil {
			g0, _ = sc.Stats()
		}
		ph := p.phase(b, each)
		s1, _ := pl.Probes().Stats()
		if sc := pl.Sched(); sc != nil {
			g1, _ := sc.Stats()
			gcHits += g1.GCHits - g0.GCHits
		}
		var ps map[string]tcp.ProgramStat
		if runStats {
			ps, _ = pl.TCP().ProgramStats()
			st.Close()
		}
		cancel()
		if err := <-ran; err != nil {
			b.Fatal(err)
		}
		pl.Close()
		hits += s1.UprobeHits() - s0.UprobeHits()
		byProbe.add(s0, s1)
		reqsOn += uint64(ph.reqs)
		return ph, ps
	}
	for i := 0; i < rounds; i++ {
		var off, on phase
		if i%2 == 0 { // ABBA
			off = p.phase(b, each)
			on, _ = traced(false)
		} else {
			on, _ = traced(false)
			off = p.phase(b, each)
		}
		offRPS, onRPS = append(offRPS, float64(off.reqs)/each.Seconds()), append(onRPS, float64(on.reqs)/each.Seconds())
		offCPU, onCPU = append(offCPU, off.cpu()), append(onCPU, on.cpu())
		offAgent, onAgent = append(offAgent, off.agentCPU), append(onAgent, on.agentCPU)
	}
	// One more traced phase with the kernel's run statistics on (a clock
	// read per program run: kept out of the measured rounds): every kernel
	// program's runs per request.
	extra, ps := traced(true)
	ratio, noise := abRatio(offRPS, onRPS)
	cpuRatio, cpuNoise := abRatio(offCPU, onCPU)
	perReq := float64(hits) / float64(reqsOn)
	fmt.Fprintf(os.Stderr, "\nThe success path traced as `tracer trace` does (%s HTTP service at saturation, timeouts met), detail=%s, %d rounds ABBA:\n", svc, mode, rounds)
	fmt.Fprintf(os.Stderr, "  requests/s off %.0f, on %.0f: ratio %.3f (A/A spread %s)\n", median(offRPS), median(onRPS), ratio, pct(noise))
	fmt.Fprintf(os.Stderr, "  CPU per request (service + agent) off %.1f µs, on %.1f µs: ratio %.3f (A/A spread %s); the agent's part %.2f µs (idle: %.2f)\n",
		median(offCPU)/1e3, median(onCPU)/1e3, cpuRatio, pct(cpuNoise), median(onAgent)/1e3, median(offAgent)/1e3)
	fmt.Fprintf(os.Stderr, "  uprobe hits per request: %.3f (deadline probes); GC stop-the-world probes: %.4f per request (per GC cycle, not per request)\n",
		perReq, float64(gcHits)/float64(reqsOn))
	fmt.Fprintf(os.Stderr, "  kernel hook runs per request: %s\n", kernelRuns(ps, extra.reqs))
	if perReq == 0 {
		// What does not depend on the machine's noise: the kernel
		// programs' own time (run statistics: without the tracepoint
		// dispatch around them, with the statistics' clock reads) and
		// the agent's CPU, against the untraced request.
		var kns float64
		for _, st := range ps {
			kns += float64(st.Runtime.Nanoseconds())
		}
		kns /= float64(max(extra.reqs, 1))
		det := (kns + median(onAgent)) / median(offCPU)
		fmt.Fprintf(os.Stderr, "  deterministic part (without the tracepoint dispatch around the programs and the GC probe hits): kernel programs %.2f µs + agent %.2f µs per request = %.1f%% of the untraced request's %.1f µs (ratio %.3f)\n",
			kns/1e3, median(onAgent)/1e3, 100*det, median(offCPU)/1e3, 1/(1+det))
	}
	if perReq > 0 {
		fmt.Fprintf(os.Stderr, "  hits per request by probe: %s\n", byProbe.perRequest(reqsOn))
		fmt.Fprintf(os.Stderr, "  => %.1f µs of CPU per uprobe hit\n", (median(onCPU)-median(offCPU))/1e3/perReq)
	} else {
		fmt.Fprintf(os.Stderr, "  verdict (target 0.98, throughput): %s; CPU per request: %s\n", verdict(ratio, noise, 0.98), verdict(1/cpuRatio, cpuNoise, 0.98))
	}
	b.ReportMetric(ratio, "throughput-ratio")
	b.ReportMetric(cpuRatio, "cpu-per-req-ratio")
	b.ReportMetric(perReq, "uprobe-hits/req")
}

// kernelRuns lists the kernel programs that ran, with runs per request and
// their mean run time.
func kernelRuns(ps map[string]tcp.ProgramStat, reqs int64) string {
	names := make([]string, 0, len(ps))
	for n, st := range ps {
		if st.Runs > 0 {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		st := ps[n]
		out = append(out, fmt.Sprintf("%s %.2f (%.0f ns)", n, float64(st.Runs)/float64(reqs), float64(st.Runtime.Nanoseconds())/float64(st.Runs)))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
