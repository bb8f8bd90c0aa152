package export

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestOTLPEndpointFlapping: the OTLP receiver goes down and comes back
// again and again (8 cycles) while timeouts keep coming at ~500/s. The
// live heap stays within the queues' bound, every report is exported,
// failed or dropped and counted, and after the last recovery export
// resumes: the reports sent then arrive.
func TestOTLPEndpointFlapping(t *testing.T) {
	for _, protocol := range Protocols {
		t.Run(protocol, func(t *testing.T) {
			rcv := newReceiver(t, protocol)
			o, err := NewOTLP(context.Background(), OTLPConfig{Protocol: protocol, Endpoint: rcv.endpoint(), Insecure: true,
				BatchTimeout: 20 * time.Millisecond, ExportTimeout: 200 * time.Millisecond, Processes: NewProcesses(0)})
			if err != nil {
				t.Fatal(err)
			}
			next := 1
			var peak uint64
			send := func(k int) {
				for range k {
					r := numbered(next)
					next++
					o.Export(&r)
					if next%100 == 0 {
						time.Sleep(200 * time.Millisecond) // ~500 reports/s
						peak = max(peak, heapAlloc())
					}
				}
			}
			const cycles = 8
			var perCycle []float64
			forgotten := 0
			for range cycles {
				send(300) // up
				rcv.stop()
				send(300) // down
				rcv.start(t)
				// The receiver runs in this process: what it keeps of the
				// spans must not count as the exporter's heap.
				forgotten += rcv.forget()
				perCycle = append(perCycle, float64(heapAlloc())/(1<<20))
			}
			// Recovery: what is sent once the endpoint stays up arrives.
			backFrom := next
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
			for deadline := time.Now().Add(20 * time.Second); !arrivedAfter(); {
				if time.Now().After(deadline) {
					t.Fatalf("export did not resume after the endpoint came back: %+v", o.Stats())
				}
				send(1)
				time.Sleep(50 * time.Millisecond)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := o.Close(ctx); err != nil {
				t.Fatal(err)
			}
			s := o.Stats()
			checkConservation(t, s)
			if s.Failed+s.DroppedQueueFull == 0 {
				t.Errorf("%d outages and no failed or dropped report counted: %+v", cycles, s)
			}
			got, _, _ := rcv.counts()
			got += forgotten
			if uint64(got) < s.Exported || uint64(got) > s.Exported+s.Failed {
				t.Errorf("receiver got %d spans, exporter counted %d exported and %d failed", got, s.Exported, s.Failed)
			}
			if peak > 32<<20 {
				t.Errorf("live heap peaked at %.1f MiB: beyond the queues' bound", float64(peak)/(1<<20))
			}
			t.Logf("%d outages: live heap peak %.1f MiB, after each cycle (MiB) %.1f; %+v; receiver got %d", cycles, float64(peak)/(1<<20), perCycle, s, got)
		})
	}
}

// forget drops the spans received so far and says how many there were.
func (r *receiver) forget() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.spans)
	r.spans = nil
	return n
}
