package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// TestVerifyRTOs: a blackhole's series passes only with three or more rto
// events owned by the client, backoff +1 each (a gap only with nothing lost
// and the RTO doubled per step), RTO >= 200 ms and doubling;
// events without an owner are told apart (errUnowned) from wrong owners.
func TestVerifyRTOs(t *testing.T) {
	const pid = 42
	series := func(mod func(i int, e *event.TCP)) []event.TCP {
		evs := []event.TCP{{Kind: event.TCPTLP, PID: pid, Comm: "tcpclient", State: 1}}
		for i := 0; i < 3; i++ {
			e := event.TCP{Kind: event.TCPRTO, PID: pid, Comm: "tcpclient", State: 1, CAState: 4, Cookie: 7,
				Backoff: uint8(i), RTO: time.Duration(204<<i) * time.Millisecond}
			if mod != nil {
				mod(i, &e)
			}
			evs = append(evs, e)
		}
		return evs
	}
	if _, err := verifyRTOs(series(nil), pid, 9, 0); err != nil {
		t.Fatalf("good series rejected: %v", err)
	}
	bad := map[string][]event.TCP{
		"two rtos":       series(nil)[:3],
		"other owner":    series(func(i int, e *event.TCP) { e.PID = 43 }),
		"other comm":     series(func(i int, e *event.TCP) { e.Comm = "kmatrix" }),
		"backoff stuck":  series(func(i int, e *event.TCP) { e.Backoff = 0 }),
		"rto not loss":   series(func(i int, e *event.TCP) { e.CAState = 3 }),
		"rto too small":  series(func(i int, e *event.TCP) { e.RTO = 20 * time.Millisecond }),
		"rto not double": series(func(i int, e *event.TCP) { e.RTO = 204 * time.Millisecond }),
		"backoff back":   series(func(i int, e *event.TCP) { e.Backoff = uint8(2 - i) }),
		// a skipped firing whose RTO does not match its backoff
		"gap, rto off": series(func(i int, e *event.TCP) {
			if i > 0 {
				e.Backoff++
			}
		}),
	}
	for name, evs := range bad {
		if _, err := verifyRTOs(evs, pid, 9, 0); err == nil || errors.Is(err, errUnowned) {
			t.Errorf("%s: got %v, want a failure other than errUnowned", name, err)
		}
	}
	// A firing the kernel did not trace (backoff 0,2,3, RTO doubled per
	// step) passes when no event was lost, and says so; not otherwise.
	gap := series(func(i int, e *event.TCP) {
		if i > 0 {
			e.Backoff++
			e.RTO *= 2
		}
	})
	if detail, err := verifyRTOs(gap, pid, 9, 0); err != nil || !strings.Contains(detail, "no event at backoff 1,") {
		t.Errorf("untraced firing: got %q, %v; want a pass naming backoff 1", detail, err)
	}
	if _, err := verifyRTOs(gap, pid, 9, 1); err == nil {
		t.Error("untraced firing with an event lost: passed, want a failure")
	}
	_, err := verifyRTOs(series(func(i int, e *event.TCP) { e.PID, e.Comm = 0, "" }), pid, 9, 0)
	if !errors.Is(err, errUnowned) {
		t.Errorf("unowned events: got %v, want errUnowned", err)
	}
}
