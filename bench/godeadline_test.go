package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/internal/testprog"
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
// per-request timeouts are all met, with the deadline probes attached
// (B) and detached (A), alternated in one process. In --detail=auto with no
// timeouts only the cold tier is attached: the target is a ratio >= 0.99 and
// zero uprobe hits per request. With detail forced on, every request traps
// at WithDeadlineCause's entry and return: the ratio and the cost per hit are
// printed.
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

func successPath(b *testing.B, svc string, p *loadProc, detail bool) {
	const rounds, each = 10, 700 * time.Millisecond
	p.run(b, 300*time.Millisecond) // warm up: connections, JIT of nothing, caches
	var offRPS, onRPS, offCPU, onCPU []float64
	var hits, kernelHits, reqsOn uint64
	var byProbe hitCounts
	for i := 0; i < rounds; i++ {
		var a, bb int64
		var acpu, bcpu float64
		attachAndRun := func() {
			probes, err := collector.StartGo(collector.GoConfig{PID: p.cmd.Process.Pid})
			if err != nil {
				b.Fatal(err)
			}
			// Everything that is always on when tracing a process: the
			// kernel collector too, filtered to it, with activity sampling.
			tcp, err := collector.StartTCP(collector.Config{PID: uint32(p.cmd.Process.Pid), ActivityInterval: time.Second, Lifecycle: true})
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				for range tcp.Events() {
				}
			}()
			k0, _ := tcp.Stats()
			if err := probes.SetDetail(detail); err != nil {
				b.Fatal(err)
			}
			s0, _ := probes.Stats()
			bb, bcpu = p.run(b, each)
			s1, _ := probes.Stats()
			k1, _ := tcp.Stats()
			tcp.Close()
			probes.Close()
			kernelHits += k1.OwnerHits - k0.OwnerHits
			hits += s1.UprobeHits() - s0.UprobeHits()
			byProbe.add(s0, s1)
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
	perReq := float64(hits) / float64(reqsOn)
	fmt.Fprintf(os.Stderr, "\nGo deadline probes on the success path (%s HTTP service at saturation, timeouts met), detail=%v, %d rounds ABBA:\n", svc, detail, rounds)
	fmt.Fprintf(os.Stderr, "  requests/s off %.0f, on %.0f: ratio %.3f (A/A spread %s)\n", median(offRPS), median(onRPS), ratio, pct(noise))
	fmt.Fprintf(os.Stderr, "  CPU per request off %.1f µs, on %.1f µs: ratio %.3f (A/A spread %s)\n", median(offCPU)/1e3, median(onCPU)/1e3, cpuRatio, pct(cpuNoise))
	fmt.Fprintf(os.Stderr, "  uprobe hits per request: %.3f; kernel send/recv hook runs per request: %.1f (~0.1-0.3 µs each)\n", perReq, float64(kernelHits)/float64(reqsOn))
	if perReq > 0 {
		fmt.Fprintf(os.Stderr, "  hits per request by probe: %s\n", byProbe.perRequest(reqsOn))
		fmt.Fprintf(os.Stderr, "  => %.1f µs of CPU per uprobe hit\n", (median(onCPU)-median(offCPU))/1e3/perReq)
	} else {
		fmt.Fprintf(os.Stderr, "  verdict (target 0.98 with the kernel collector): %s\n", verdict(ratio, noise, 0.98))
	}
	b.ReportMetric(ratio, "throughput-ratio")
	b.ReportMetric(perReq, "uprobe-hits/req")
}
