package main

import (
	"errors"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// TestVerifyRTOs: a blackhole's series passes only with three or more rto
// events owned by the client, backoff +1 each, RTO >= 200 ms and doubling;
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
	if _, err := verifyRTOs(series(nil), pid, 9); err != nil {
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
	}
	for name, evs := range bad {
		if _, err := verifyRTOs(evs, pid, 9); err == nil || errors.Is(err, errUnowned) {
			t.Errorf("%s: got %v, want a failure other than errUnowned", name, err)
		}
	}
	_, err := verifyRTOs(series(func(i int, e *event.TCP) { e.PID, e.Comm = 0, "" }), pid, 9)
	if !errors.Is(err, errUnowned) {
		t.Errorf("unowned events: got %v, want errUnowned", err)
	}
}
