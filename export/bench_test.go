package export

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/correlate"
)

// BenchmarkOTLPExport exports batches of 2000 reports (each a span with
// five TCP events) to an in-process receiver and waits until all arrived:
// reports exported per second, bytes on the wire per report (the OTLP
// protobuf), bytes allocated per report in the tracer.
func BenchmarkOTLPExport(b *testing.B) {
	const batch = 2000
	for _, protocol := range Protocols {
		b.Run(protocol, func(b *testing.B) {
			rcv := newReceiver(b, protocol)
			o, err := NewOTLP(context.Background(), OTLPConfig{Protocol: protocol, Endpoint: rcv.endpoint(), Insecure: true,
				BatchTimeout: 20 * time.Millisecond, QueueSize: batch, Processes: NewProcesses(0)})
			if err != nil {
				b.Fatal(err)
			}
			pre := make([]correlate.Report, batch) // built outside the measurement
			var sent int
			var elapsed time.Duration
			var ms0, ms1 runtime.MemStats
			var allocated uint64
			for b.Loop() {
				for i := range pre {
					sent++
					pre[i] = numbered(sent)
				}
				runtime.ReadMemStats(&ms0)
				start := time.Now()
				for i := range pre {
					o.Export(&pre[i])
				}
				rcv.waitSpans(b, sent, time.Minute)
				elapsed += time.Since(start)
				runtime.ReadMemStats(&ms1)
				allocated += ms1.TotalAlloc - ms0.TotalAlloc
			}
			_, wire, _ := rcv.counts()
			o.Close(context.Background())
			if s := o.Stats(); s.Exported != uint64(sent) {
				b.Fatalf("exported %d of %d: %+v", s.Exported, sent, s)
			}
			b.ReportMetric(float64(sent)/elapsed.Seconds(), "reports/s")
			b.ReportMetric(float64(wire)/float64(sent), "wire-B/report")
			b.ReportMetric(float64(allocated)/float64(sent), "alloc-B/report")
		})
	}
}

// BenchmarkOTLPEndpointDownMemory is ten minutes of steady timeouts (100/s)
// against an endpoint that is down: the live heap's peak, and how much its
// floor moved between minutes 2-4 and 8-10 (flat: ~0).
func BenchmarkOTLPEndpointDownMemory(b *testing.B) {
	for b.Loop() {
		h, s := steadyTimeoutsEndpointDown(b, 10, 100)
		floors := h.floors()
		b.ReportMetric(slices.Max(h.bytes)/(1<<20), "peak-MiB")
		b.ReportMetric((slices.Max(floors[7:])-slices.Max(floors[1:4]))/(1<<20), "floor-growth-MiB")
		b.ReportMetric(float64(s.DroppedQueueFull+s.Failed)/float64(s.Reports), "dropped-share")
	}
}
