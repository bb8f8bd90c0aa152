package adaptive

import (
	"testing"
	"time"
)

func TestBurstSwitchesOnQuietSwitchesOff(t *testing.T) {
	c := New(Policy{Threshold: 3, Window: 10 * time.Second, Quiet: 30 * time.Second})
	t0 := time.Unix(1000, 0)
	// Two expiries far apart never reach the threshold.
	if c.Observe(t0) || c.Observe(t0.Add(11*time.Second)) || c.Observe(t0.Add(22*time.Second)) {
		t.Fatal("switched on without a burst")
	}
	if c.Observe(t0.Add(23*time.Second)) || c.On() {
		t.Fatal("two expiries in the window switched detail on")
	}
	// A burst: third expiry within 10 s switches on, exactly once.
	b := t0.Add(100 * time.Second)
	if c.Observe(b) || c.Observe(b.Add(time.Second)) {
		t.Fatal("switched on before the threshold")
	}
	if !c.Observe(b.Add(2*time.Second)) || !c.On() {
		t.Fatal("burst did not switch detail on")
	}
	if c.Observe(b.Add(3 * time.Second)) {
		t.Fatal("switched on twice")
	}
	if c.Tick(b.Add(20 * time.Second)) {
		t.Fatal("switched off before the quiet period")
	}
	if !c.Tick(b.Add(34*time.Second)) || c.On() {
		t.Fatal("quiet period did not switch detail off")
	}
	if c.Tick(b.Add(100 * time.Second)) {
		t.Fatal("switched off twice")
	}
}

func TestValidate(t *testing.T) {
	if DefaultPolicy().Validate() != nil {
		t.Fatal("default policy invalid")
	}
	if (Policy{Threshold: 0, Window: time.Second, Quiet: time.Second}).Validate() == nil {
		t.Fatal("zero threshold accepted")
	}
}
