// Package storm is the storm guard: it keeps the uprobes' cost to a traced
// process bounded when that process hits them faster than a tracer may
// afford. A uprobe hit costs ~13 µs on the development machines (a trap
// through the hypervisor; ~1 µs on bare metal): a process whose deadlines
// expire 100 000 times a second would spend more than a CPU in traps.
//
// The rule: every Interval the guard reads the process's probe hits (cold
// and detail). When more than MaxHitsPerSec hit per second since it last looked, every
// probe of the process is detached for Cooldown, then the cold tier is
// reattached (the detail tier follows its own policy again). While
// detached, expiries are not seen: the guard says so (a line, a log entry,
// a metric) and estimates how many it missed from the rate before the
// trip (the storm runs faster unprobed, so the estimate is low). It never decides from a single hit, and it never leaves a
// process unwatched for longer than Cooldown at a time.
//
// Shedding comes first (TickShedding): while the detail tier or the call
// probes are on and the cold tier's hits alone are within the limit, only
// those come off, for Cooldown; the cold tier stays and every expiry is
// still seen. A busy client that starts timing out turns the detail tier
// on, and its 13-20 traps per request would otherwise take every probe
// off: measured, 80 timeouts logged and 10 reported.
package storm

import (
	"fmt"
	"time"
)

// Interval is how often the guard looks: a storm costs the target at most
// this long of unguarded traps before the probes come off.
const Interval = 250 * time.Millisecond

// Policy says when the guard trips. MaxHitsPerSec 0 disables it.
type Policy struct {
	MaxHitsPerSec uint64
	Cooldown      time.Duration
}

// DefaultPolicy is the policy of the flags' defaults: 4000 hits/s is ~5 % of a core at 13 µs a hit (0.4 % on
// bare metal); a 10 s cool-down keeps a storm's reports coming (a second
// of them every ~11 s) while its cost stays bounded.
func DefaultPolicy() Policy { return Policy{MaxHitsPerSec: 4000, Cooldown: 10 * time.Second} }

// Validate rejects policies that cannot work.
func (p Policy) Validate() error {
	if p.MaxHitsPerSec > 0 && p.Cooldown <= 0 {
		return fmt.Errorf("invalid storm guard: cool-down %v must be positive", p.Cooldown)
	}
	return nil
}

// Stats are the guard's counters.
type Stats struct {
	Trips          uint64        // times the probes were detached
	Sheds          uint64        // times only the detail tier and call probes were detached
	Detached       time.Duration // total time detached, including now
	UnseenEstimate uint64        // expiries estimated missed while detached (rate before the trip × time detached)
}

// Guard applies a Policy to one process. Not safe for concurrent use.
type Guard struct {
	p        Policy
	lastAt   time.Time
	lastHits uint64
	lastExp  uint64
	lastCold uint64
	tripped  bool
	since    time.Time
	expRate  float64 // expiries/s in the second before the trip
	coldRate float64 // the cold tier's hits/s, likewise
	stats    Stats
	primed   bool
	shed     bool // the detail tier and call probes are held off
	shedAt   time.Time
}

// New returns a guard with the probes attached.
func New(p Policy) *Guard { return &Guard{p: p} }

// Tripped reports whether the probes are detached by the guard.
func (g *Guard) Tripped() bool { return g.tripped }

// Shedding reports whether the guard holds the detail tier and the call
// probes off (the cold tier attached), or all probes (Tripped).
func (g *Guard) Shedding() bool { return g.shed || g.tripped }

// Decision is what Tick asks the caller to do.
type Decision int

const (
	Keep   Decision = iota // nothing to change
	Detach                 // detach every probe of the process
	Resume                 // reattach the cold tier
	Shed                   // detach the detail tier and the call probes; keep the cold tier
	Unshed                 // the detail tier and the call probes may come back
)

// Tick takes the process's cumulative probe hits and expiry hits at now
// and says what to do. Rates are measured over at least Interval. It never
// sheds: TickShedding with extra false.
func (g *Guard) Tick(now time.Time, hits, expiries uint64) (Decision, string) {
	return g.TickShedding(now, hits, expiries, false)
}

// TickShedding is Tick with shedding: expiries are the cold tier's hits
// (each an expiry), and extra says whether the detail tier or the call
// probes are attached now. Over the limit, with extra on and the cold
// hits alone within it, it says Shed; otherwise Detach.
func (g *Guard) TickShedding(now time.Time, hits, expiries uint64, extra bool) (Decision, string) {
	return g.TickCold(now, hits, expiries, expiries, extra)
}

// TickCold is TickShedding where the cold tier's hits are not one per
// expiry: cold counts its traps (a deadline with two timers, a dial's
// socket deadline beside its context's, traps twice for one expiry),
// expiries the expiries seen (the estimate of those missed while
// detached).
func (g *Guard) TickCold(now time.Time, hits, cold, expiries uint64, extra bool) (Decision, string) {
	if g.p.MaxHitsPerSec == 0 {
		return Keep, ""
	}
	if g.shed && !g.tripped && now.Sub(g.shedAt) >= g.p.Cooldown {
		g.shed = false
		g.lastAt, g.lastHits, g.lastExp, g.lastCold = now, hits, expiries, cold
		return Unshed, fmt.Sprintf("hold of %v on the detail and call probes over", g.p.Cooldown)
	}
	if g.tripped {
		if now.Sub(g.since) < g.p.Cooldown {
			return Keep, ""
		}
		g.end(now)
		g.lastAt, g.lastHits, g.lastExp, g.lastCold = now, hits, expiries, cold
		return Resume, fmt.Sprintf("cool-down of %v over", g.p.Cooldown)
	}
	if !g.primed {
		g.primed, g.lastAt, g.lastHits, g.lastExp, g.lastCold = true, now, hits, expiries, cold
		return Keep, ""
	}
	dt := now.Sub(g.lastAt)
	if dt < Interval {
		return Keep, ""
	}
	rate := float64(hits-g.lastHits) / dt.Seconds()
	g.expRate = float64(expiries-g.lastExp) / dt.Seconds()
	g.coldRate = float64(cold-g.lastCold) / dt.Seconds()
	g.lastAt, g.lastHits, g.lastExp, g.lastCold = now, hits, expiries, cold
	if rate <= float64(g.p.MaxHitsPerSec) {
		return Keep, ""
	}
	if extra && !g.shed && g.coldRate <= float64(g.p.MaxHitsPerSec) {
		g.shed, g.shedAt = true, now
		g.stats.Sheds++
		return Shed, fmt.Sprintf("%.0f probe hits/s (%.0f of them the cold tier's, %.0f expiries) over the limit of %d/s: detail and call probes detached for %v; the cold tier stays, every expiry is still seen",
			rate, g.coldRate, g.expRate, g.p.MaxHitsPerSec, g.p.Cooldown)
	}
	g.shed = false // everything comes off; after the cool-down the tiers follow their policies
	g.tripped, g.since = true, now
	g.stats.Trips++
	return Detach, fmt.Sprintf("%.0f probe hits/s (%.0f expiries/s) over the limit of %d/s: probes detached for %v, expiries meanwhile not seen",
		rate, g.expRate, g.p.MaxHitsPerSec, g.p.Cooldown)
}

func (g *Guard) end(now time.Time) {
	d := now.Sub(g.since)
	g.stats.Detached += d
	g.stats.UnseenEstimate += uint64(g.expRate * d.Seconds())
	g.tripped = false
}

// Stats returns the counters at now (a cool-down in progress counts up
// to now).
func (g *Guard) Stats(now time.Time) Stats {
	s := g.stats
	if g.tripped {
		d := now.Sub(g.since)
		s.Detached += d
		s.UnseenEstimate += uint64(g.expRate * d.Seconds())
	}
	return s
}

// Retrip starts another cool-down at now without counting a new trip:
// the caller could not reattach the probes and will try again.
func (g *Guard) Retrip(now time.Time) {
	g.tripped, g.since = true, now
}
