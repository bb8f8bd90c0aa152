package export

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// StormStats are the storm guard's counters of one traced process (see
// pipeline/storm): probes detached because they hit too fast.
type StormStats struct {
	Trips           uint64
	DetachedSeconds float64
	UnseenEstimate  uint64
	Sheds           uint64 // times only the detail tier and call probes came off
}

// WatchStorm exports a storm guard's counters, read at scrape time:
// timeout_tracer_storm_guard_trips_total,
// timeout_tracer_storm_guard_detached_seconds_total,
// timeout_tracer_storm_guard_unseen_expiries_estimated_total and
// timeout_tracer_storm_guard_sheds_total. Sources
// add up (one per traced process); the three series exist from the first
// attached process on.
func (m *Metrics) WatchStorm(stats func() StormStats) {
	m.stormOnce.Do(func() {
		m.storm = &stormCollector{
			trips: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "storm_guard_trips_total"),
				"Times the storm guard detached a process's probes because they hit faster than --storm-max-hits per second.", nil, nil),
			detached: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "storm_guard_detached_seconds_total"),
				"Time the probes of traced processes were detached by the storm guard: expiries then are not seen.", nil, nil),
			unseen: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "storm_guard_unseen_expiries_estimated_total"),
				"Expiries estimated missed while the storm guard held probes detached (the rate before each trip times the time detached; low, since traps slow the target).", nil, nil),
			sheds: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "storm_guard_sheds_total"),
				"Times the storm guard detached only a process's detail tier and call probes (the cold tier stays: every expiry still seen).", nil, nil),
		}
		m.reg.MustRegister(m.storm)
	})
	m.storm.mu.Lock()
	m.storm.sources = append(m.storm.sources, stats)
	m.storm.mu.Unlock()
}

type stormCollector struct {
	trips, detached, unseen, sheds *prometheus.Desc

	mu      sync.Mutex
	sources []func() StormStats
}

func (c *stormCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.trips
	ch <- c.detached
	ch <- c.unseen
	ch <- c.sheds
}

func (c *stormCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var sum StormStats
	for _, f := range c.sources {
		s := f()
		sum.Trips += s.Trips
		sum.DetachedSeconds += s.DetachedSeconds
		sum.UnseenEstimate += s.UnseenEstimate
		sum.Sheds += s.Sheds
	}
	ch <- prometheus.MustNewConstMetric(c.trips, prometheus.CounterValue, float64(sum.Trips))
	ch <- prometheus.MustNewConstMetric(c.detached, prometheus.CounterValue, sum.DetachedSeconds)
	ch <- prometheus.MustNewConstMetric(c.unseen, prometheus.CounterValue, float64(sum.UnseenEstimate))
	ch <- prometheus.MustNewConstMetric(c.sheds, prometheus.CounterValue, float64(sum.Sheds))
}
