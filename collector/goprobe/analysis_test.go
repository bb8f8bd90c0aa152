package goprobe

import (
	"log/slog"
	"os"
	"testing"

	"github.com/timeout-tracer/tracer/gobin"
	"github.com/timeout-tracer/tracer/lab/testprog"
)

// BenchmarkAnalysis: what attaching to a process of a new executable costs
// before its first probe: opening it and resolving every probe site and
// layout (Process.resolve), from a cold start each time (a process of an
// executable the agent has not analysed, or released). Its expiries before
// then are not seen: the first burst of a storm of a program just started.
// labapp (grpc-go, OpenTelemetry, net/http; DWARF) by default; TT_BIN
// names another executable (docs/benchmarks.md: Caddy's 78 MiB, goose's 60 MiB).
func BenchmarkAnalysis(b *testing.B) {
	path := os.Getenv("TT_BIN")
	if path == "" {
		path = testprog.Path(b, "labapp")
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		bin, err := gobin.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		p := &Process{log: slog.Default(), bin: bin, objs: &objects{}}
		if _, err := p.resolve(); err != nil {
			b.Fatal(err)
		}
		bin.Close()
	}
	b.ReportMetric(float64(st.Size())/(1<<20), "MB")
}
