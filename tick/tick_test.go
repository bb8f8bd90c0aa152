package tick

import (
	"testing"
	"time"
)

// TestNext: the instants are multiples of the period past the
// process's phase (so a 100 ms
// timer and a 1 s one share every tenth instant), strictly ahead, at most
// one period away.
func TestNext(t *testing.T) {
	for _, d := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, time.Second, 30 * time.Second} {
		before := time.Now()
		next := Next(d)
		if (next.UnixNano()-int64(phase))%int64(d) != 0 {
			t.Errorf("Next(%v) = %v: not a multiple of the period", d, next)
		}
		if !next.After(before) || next.Sub(before) > d {
			t.Errorf("Next(%v) = %v at %v: want within one period ahead", d, next, before)
		}
	}
	k := NewTicker(50 * time.Millisecond)
	defer k.Stop()
	for i := 0; i < 3; i++ {
		<-k.C
		k.Next()
	}
	k.Reset(time.Second)
	select {
	case <-k.C:
	case <-time.After(5 * time.Second):
		t.Fatal("no tick within 5 s of a 1 s period")
	}
}
