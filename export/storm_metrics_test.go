package export

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// Two traced processes' storm guards add up, read at scrape time, and the
// series pass promlint.
func TestStormMetrics(t *testing.T) {
	m := newTestMetrics(t)
	trips := uint64(1)
	m.WatchStorm(func() StormStats { return StormStats{Trips: trips, DetachedSeconds: 10, UnseenEstimate: 5000} })
	m.WatchStorm(func() StormStats { return StormStats{Trips: 2, DetachedSeconds: 2.5, UnseenEstimate: 100} })
	trips = 3
	out := scrape(t, m)
	for _, want := range []string{
		"timeout_tracer_storm_guard_trips_total 5",
		"timeout_tracer_storm_guard_detached_seconds_total 12.5",
		"timeout_tracer_storm_guard_unseen_expiries_estimated_total 5100",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("scrape lacks %q", want)
		}
	}
	problems, err := promlint.New(strings.NewReader(out)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "timeout_tracer_storm") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}
