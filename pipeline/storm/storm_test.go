package storm

import (
	"testing"
	"time"
)

// The guard trips only on a rate over the limit measured over at least
// an interval, stays tripped for the cool-down, resumes, trips again if
// the storm goes on, and counts what it did.
func TestGuardTripsAndResumes(t *testing.T) {
	g := New(Policy{MaxHitsPerSec: 1000, Cooldown: 2 * time.Second})
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		at         time.Duration
		hits, exps uint64
		want       Decision
	}{
		{0, 0, 0, Keep}, // primes the baseline
		{100 * time.Millisecond, 5000, 5000, Keep},                 // too soon to measure
		{time.Second, 900, 900, Keep},                              // 900/s over a second: under
		{2 * time.Second, 2000, 1500, Detach},                      // 1100/s: over
		{3 * time.Second, 2000, 1500, Keep},                        // cooling down
		{4 * time.Second, 2000, 1500, Resume},                      // cool-down over
		{4*time.Second + 300*time.Millisecond, 2600, 1800, Detach}, // 2000/s: the storm goes on
		{6*time.Second + 300*time.Millisecond, 2600, 1800, Resume},
		{7*time.Second + 300*time.Millisecond, 2700, 1900, Keep}, // calm
	}
	for _, s := range steps {
		if d, reason := g.Tick(at(s.at), s.hits, s.exps); d != s.want {
			t.Fatalf("at %v (hits %d): %v (%q), want %v", s.at, s.hits, d, reason, s.want)
		}
	}
	st := g.Stats(at(8 * time.Second))
	if st.Trips != 2 || st.Detached != 4*time.Second {
		t.Errorf("stats %+v, want 2 trips, 4s detached", st)
	}
	// Estimates: 600 expiries/s × 2 s, then 1000/s × 2 s.
	if st.UnseenEstimate != 3200 {
		t.Errorf("unseen estimate %d, want 3200", st.UnseenEstimate)
	}
}

func TestGuardOff(t *testing.T) {
	g := New(Policy{})
	for i := 0; i < 5; i++ {
		if d, _ := g.Tick(time.Unix(int64(i), 0), uint64(i)*1e9, 0); d != Keep {
			t.Fatalf("a disabled guard decided %v", d)
		}
	}
	if (Policy{MaxHitsPerSec: 10}).Validate() == nil {
		t.Error("a guard without a cool-down validated")
	}
	if DefaultPolicy().Validate() != nil {
		t.Error("the default policy does not validate")
	}
}

// With the detail tier on and the cold hits alone within the limit, the
// guard sheds the detail and call probes only, for the cool-down, and
// lets them back; the cold tier comes off only when its own hits pass the
// limit.
func TestGuardShedsDetailFirst(t *testing.T) {
	g := New(Policy{MaxHitsPerSec: 1000, Cooldown: 2 * time.Second})
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		at         time.Duration
		hits, cold uint64
		extra      bool
		want       Decision
		shedding   bool
	}{
		{0, 0, 0, true, Keep, false},
		{time.Second, 5000, 300, true, Shed, true},          // 5000 hits/s, 300 cold: shed the detail tier
		{2 * time.Second, 5600, 600, false, Keep, true},     // held; 600/s cold alone is fine
		{3 * time.Second, 6200, 900, false, Unshed, false},  // the hold is over
		{4 * time.Second, 11200, 1200, true, Shed, true},    // the detail tier came back, and the storm with it
		{5 * time.Second, 12800, 2800, false, Detach, true}, // now the cold hits alone: 1600/s
		{7 * time.Second, 12800, 2800, false, Resume, false},
	}
	for _, s := range steps {
		d, reason := g.TickShedding(at(s.at), s.hits, s.cold, s.extra)
		if d != s.want || g.Shedding() != s.shedding {
			t.Fatalf("at %v: %v (%q), shedding %v; want %v, shedding %v", s.at, d, reason, g.Shedding(), s.want, s.shedding)
		}
	}
	if st := g.Stats(at(8 * time.Second)); st.Sheds != 2 || st.Trips != 1 || st.Detached != 2*time.Second {
		t.Errorf("stats %+v, want 2 sheds, 1 trip, 2s detached", st)
	}
}

// A deadline with two timers (net/http's Client.Timeout over a wrapped
// transport, a dial's socket deadline) traps twice per expiry: the shed
// decision weighs the cold tier's traps, and the estimate of expiries
// missed while detached counts expiries, not traps.
func TestGuardWeighsColdTraps(t *testing.T) {
	g := New(Policy{MaxHitsPerSec: 1000, Cooldown: 2 * time.Second})
	t0 := time.Unix(1000, 0)
	if d, _ := g.TickCold(t0, 0, 0, 0, true); d != Keep {
		t.Fatalf("first tick: %v", d)
	}
	// 1800 hits/s, 1200 of them the cold tier's for 600 expiries: the
	// cold tier alone is over the limit, so shedding would not do.
	if d, reason := g.TickCold(t0.Add(time.Second), 1800, 1200, 600, true); d != Detach {
		t.Fatalf("cold traps over the limit: %v (%q), want Detach", d, reason)
	}
	if st := g.Stats(t0.Add(3 * time.Second)); st.UnseenEstimate != 1200 {
		t.Errorf("unseen estimate %d, want 1200 (600 expiries/s for 2 s)", st.UnseenEstimate)
	}
}
