package correlate

import (
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// Each connection of a report lists its own TCP events in the window, in
// time order, with their kernel times; a long backoff keeps the newest
// MaxReportEvents and says how many older ones it left out, while Counts
// still cover them all.
func TestConnectionTimeline(t *testing.T) {
	sc := newScenario("timeline", "")
	a := sc.conn(0x1001, 4242, "labapp", "10.213.0.1:41544", "10.213.0.2:8080", 81*time.Microsecond)
	a.handshake(0, 51)
	a.bind(1000.02, 51, event.BindHTTPRoundTrip)
	a.act(1000.05, 51, true)
	a.blackhole(1000.05, 60_000) // TLP + 8 RTOs in the minute
	sc.deadline(4242, "labapp", 999, 59_000, 51, at)

	for _, tc := range []struct {
		max, want, omitted int
	}{{0, 9, 0}, {4, 4, 5}} { // 0: the default (16); a TLP and 8 RTOs (the handshake is before the window)
		c, err := New(Config{MaxReportEvents: tc.max})
		if err != nil {
			t.Fatal(err)
		}
		var reports []Report
		for _, ev := range sc.events() {
			reports = append(reports, c.Push(ev)...)
		}
		reports = append(reports, c.Flush()...)
		if len(reports) != 1 || len(reports[0].Cause.Connections) != 1 {
			t.Fatalf("max %d: want one report with one connection: %+v", tc.max, reports)
		}
		cn := reports[0].Cause.Connections[0]
		if len(cn.Events) != tc.want || cn.EventsOmitted != tc.omitted {
			t.Fatalf("max %d: %d events, %d omitted; want %d, %d: %+v", tc.max, len(cn.Events), cn.EventsOmitted, tc.want, tc.omitted, cn.Events)
		}
		last := cn.Events[len(cn.Events)-1]
		if last.Kind != "rto" || last.Backoff != 7 || last.RTOMs != 204<<7 || cn.Counts["rto"] != 8 {
			t.Errorf("max %d: last event %+v, rto count %d; want the 8th RTO (backoff 7, rto %d ms)", tc.max, last, cn.Counts["rto"], 204<<7)
		}
		for i, e := range cn.Events {
			if i > 0 && e.Mono < cn.Events[i-1].Mono {
				t.Errorf("max %d: events out of order at %d: %+v", tc.max, i, cn.Events)
			}
			if want := wall(float64(e.Mono-baseMono) / 1e6); !e.Time.Equal(want) {
				t.Errorf("max %d: event %d at %v, want %v (its kernel time)", tc.max, i, e.Time, want)
			}
		}
	}
}
