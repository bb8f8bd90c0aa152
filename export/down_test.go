package export

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/lab/testenv"
)

// numbered returns the sample report with trace ID n, so that a receiver
// can tell which reports arrived.
func numbered(n int) correlate.Report {
	r := sampleReport()
	r.Deadline.TraceID = fmt.Sprintf("%032x", n)
	r.Deadline.Ctx = uint64(n)
	return r
}

func checkConservation(t *testing.T, s OTLPStats) {
	t.Helper()
	if s.Queued != 0 || s.Reports != s.Exported+s.Failed+s.DroppedQueueFull+s.DroppedShutdown {
		t.Errorf("after Close: %+v: every report must be exported, failed or dropped, and counted", s)
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// An endpoint that is down for the whole run: Export never blocks, the
// queues stay within their bounds, every report is counted as failed or
// dropped, and Close returns within its time.
func TestOTLPEndpointDown(t *testing.T) {
	for _, protocol := range Protocols {
		t.Run(protocol, func(t *testing.T) {
			endpoint := freeAddr(t)
			if protocol == ProtocolHTTPProtobuf {
				endpoint = "http://" + endpoint + "/v1/traces"
			}
			o, err := NewOTLP(context.Background(), OTLPConfig{Protocol: protocol, Endpoint: endpoint, Insecure: true,
				QueueSize: 64, MaxQueueSize: 128, BatchSize: 32, BatchTimeout: 20 * time.Millisecond,
				ExportTimeout: 200 * time.Millisecond, Processes: NewProcesses(0)})
			if err != nil {
				t.Fatal(err)
			}
			heap0 := heapAlloc()
			const n = 20000
			start := time.Now()
			var slowest time.Duration
			for i := range n {
				r := numbered(i + 1)
				t0 := time.Now()
				o.Export(&r)
				slowest = max(slowest, time.Since(t0))
			}
			took := time.Since(start)
			if took > 2*time.Second {
				t.Errorf("%d exports took %v: Export must not wait for the endpoint", n, took)
			}
			time.Sleep(600 * time.Millisecond) // a few export attempts fail
			s := o.Stats()
			if s.Queued > 64+128 {
				t.Errorf("queued %d, beyond the bounds 64+128", s.Queued)
			}
			if s.DroppedQueueFull < n-64-128-s.Failed || s.Failed == 0 || s.Exported != 0 {
				t.Errorf("stats %+v: want drops counted, failed exports counted, nothing exported", s)
			}
			if grew := int64(heapAlloc()) - int64(heap0); grew > 4<<20 {
				t.Errorf("heap grew %d KiB with the endpoint down", grew>>10)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			closeStart := time.Now()
			o.Close(ctx)
			if d := time.Since(closeStart); d > 1500*time.Millisecond {
				t.Errorf("Close took %v with a 500ms deadline", d)
			}
			s = o.Stats()
			checkConservation(t, s)
			t.Logf("%d reports in %v (slowest Export %v): %+v", n, took, slowest, s)
		})
	}
}

// An endpoint that goes down mid-run and comes back: what is exported
// while it is down fails and is counted, and export resumes by itself once
// it is back.
func TestOTLPEndpointRecovers(t *testing.T) {
	for _, protocol := range Protocols {
		t.Run(protocol, func(t *testing.T) {
			rcv := newReceiver(t, protocol)
			o, err := NewOTLP(context.Background(), OTLPConfig{Protocol: protocol, Endpoint: rcv.endpoint(), Insecure: true,
				QueueSize: 64, MaxQueueSize: 128, BatchSize: 32, BatchTimeout: 20 * time.Millisecond,
				ExportTimeout: time.Second, Processes: NewProcesses(0)})
			if err != nil {
				t.Fatal(err)
			}
			next := 1
			send := func(k int, every time.Duration) {
				for range k {
					r := numbered(next)
					next++
					o.Export(&r)
					time.Sleep(every)
				}
			}
			send(20, 0)
			rcv.waitSpans(t, 20, 10*time.Second)

			rcv.stop()
			send(500, time.Millisecond)
			for deadline := time.Now().Add(10 * time.Second); o.Stats().Failed == 0; {
				if time.Now().After(deadline) {
					t.Fatalf("no failed export counted while the endpoint is down: %+v", o.Stats())
				}
				time.Sleep(20 * time.Millisecond)
			}
			down := o.Stats()

			rcv.start(t)
			backFrom := next
			// gRPC re-dials with a backoff of at most 5 s.
			arrivedAfter := func() bool {
				for _, s := range rcv.received() {
					var n int
					fmt.Sscanf(hexID(s.span.TraceId), "%x", &n)
					if n >= backFrom {
						return true
					}
				}
				return false
			}
			for deadline := time.Now().Add(15 * time.Second); !arrivedAfter(); {
				if time.Now().After(deadline) {
					t.Fatalf("export did not resume after the endpoint came back: %+v", o.Stats())
				}
				send(1, 50*time.Millisecond)
			}
			before, _, _ := rcv.counts()
			send(20, 5*time.Millisecond)
			rcv.waitSpans(t, before+20, 10*time.Second)

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := o.Close(ctx); err != nil {
				t.Fatal(err)
			}
			s := o.Stats()
			checkConservation(t, s)
			// An export whose answer comes after its timeout is counted
			// failed although the receiver has it: at least once, never
			// counted exported without arriving.
			got, _, _ := rcv.counts()
			if uint64(got) < s.Exported || uint64(got) > s.Exported+s.Failed {
				t.Errorf("receiver got %d spans, exporter counted %d exported and %d failed", got, s.Exported, s.Failed)
			}
			t.Logf("while down: %+v; at the end: %+v", down, s)
		})
	}
}

// heapTrend is the live heap sampled while a steady stream of reports
// meets an endpoint that is down.
type heapTrend struct {
	minute []int     // simulated minute of each sample
	bytes  []float64 // live heap at each sample
}

// floors is the lowest sample of each minute. A single sample depends on
// what is in flight when it is taken (a batch being encoded is ~3 MiB,
// the retry buffers of a failing export more), so samples swing by MiBs
// whatever the trend; the floor of a minute is what stays live through
// it, and a leak raises it steadily.
func (h heapTrend) floors() []float64 {
	var out []float64
	for i, m := range h.minute {
		for len(out) <= m {
			out = append(out, h.bytes[i])
		}
		out[m] = min(out[m], h.bytes[i])
	}
	return out
}

// steadyTimeoutsEndpointDown sends minutes×60×perSecond reports to an
// endpoint that is down, one simulated second at a time (the failing
// exports' timeouts made short, so that retries and failures cycle as
// they would over the real minutes), sampling the live heap every
// simulated second from the second minute on (the first fills the
// queues).
func steadyTimeoutsEndpointDown(tb testing.TB, minutes, perSecond int) (heapTrend, OTLPStats) {
	o, err := NewOTLP(context.Background(), OTLPConfig{Protocol: ProtocolGRPC, Endpoint: freeAddr(tb), Insecure: true,
		ExportTimeout: 50 * time.Millisecond, BatchTimeout: 10 * time.Millisecond, Processes: NewProcesses(0)})
	if err != nil {
		tb.Fatal(err)
	}
	var h heapTrend
	for s := range minutes * 60 {
		for i := range perSecond {
			r := numbered(s*perSecond + i + 1)
			o.Export(&r)
		}
		time.Sleep(time.Millisecond)
		if s >= 60 {
			h.minute = append(h.minute, s/60)
			h.bytes = append(h.bytes, float64(heapAlloc()))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	o.Close(ctx)
	return h, o.Stats()
}

// Ten minutes of steady timeouts (100/s) with the endpoint down: the live
// heap stays within the queues' bound and does not grow: the floor of the
// last minutes is that of the first ones. (A leak of 50 bytes per report
// would raise it by 1.7 MiB.)
//
// A lab test: its heap floors are read while it runs alone (make test runs
// one package at a time); beside other packages' tests the GC's timing
// moves the floors by a few MiB (seen: 4.9 -> 6.8 MiB, under load 15).
func TestOTLPMemoryFlatEndpointDown(t *testing.T) {
	testenv.Lab(t)
	if testing.Short() {
		t.Skip("-short: 60 000 reports")
	}
	h, s := steadyTimeoutsEndpointDown(t, 10, 100)
	floors, peak := h.floors(), slices.Max(h.bytes)
	// A leak raises every later floor: the lowest of the last three
	// minutes against the highest of the early ones. One minute of the
	// last three without a GC read 12.6 MiB in a CI rehearsal (December
	// 6 2026) beside 8.9-9.0 for every other minute: not a leak.
	early, late := slices.Max(floors[1:4]), slices.Min(floors[7:])
	if late > early+1<<20 {
		t.Errorf("live heap floor %.1f MiB in minutes 8-10, %.1f MiB in minutes 2-4: it grows with the outage",
			late/(1<<20), early/(1<<20))
	}
	// The peak is one sample of 540, taken whatever is in flight: the
	// queues (~20 MiB at most, OTLPConfig) over the test's ~9 MiB floor,
	// and a failing export's buffers that gRPC has not let go yet. Six
	// runs here peaked at 21.6-24.2 MiB; a CI rehearsal once at 33.4 MiB
	// (December 6 2026) while its floors stayed at 8.6-8.9 MiB. The floor
	// check above is the leak check; this one catches a queue unbounded.
	if peak > 40<<20 {
		t.Errorf("live heap peaked at %.1f MiB: beyond the queues' bound", peak/(1<<20))
	}
	checkConservation(t, s)
	if s.DroppedQueueFull == 0 {
		t.Errorf("no drop counted: %+v", s)
	}
	t.Logf("live heap: peak %.1f MiB, floor per minute (MiB) %.1f; %+v", peak/(1<<20), mib(floors[1:]), s)
}

func mib(bs []float64) []float64 {
	out := make([]float64, len(bs))
	for i, b := range bs {
		out[i] = b / (1 << 20)
	}
	return out
}
