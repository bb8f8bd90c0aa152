package pipeline

import "testing"

// The node stream's filter answers for the event's time: a process traced
// then is kept after its removal for its earlier events, an expected one
// from its exec, an unjudged one by asking (once), a rejected one never.
func TestKeepAnswersForTheEventsTime(t *testing.T) {
	p := &Pipeline{procs: map[uint32]*procState{}}
	asked := map[uint32]int{}
	p.SetUnjudged(func(pid uint32) bool {
		asked[pid]++
		return pid == 30
	})

	// Expected from its exec, then traced, then removed at 1000.
	p.Expect(10)
	if !p.keep(10, 5) {
		t.Error("an expected process's event was dropped")
	}
	p.procs[10] = &procState{}
	delete(p.expected, 10)
	if !p.keep(10, 6) {
		t.Error("a traced process's event was dropped")
	}
	delete(p.procs, 10)
	p.endedLocked(10, 1000)
	if !p.keep(10, 999) {
		t.Error("an event from before the removal, pushed after it, was dropped")
	}
	if p.keep(10, 1001) && asked[10] == 0 {
		t.Error("an event after the removal was kept without asking")
	}

	// Judged not to be traced: dropped, never asked.
	p.Unexpect(20)
	if p.keep(20, 5) || asked[20] != 0 {
		t.Errorf("a rejected process: kept or asked %d times", asked[20])
	}
	// Forgotten (exit or exec): asked again.
	p.Forget(20)
	p.keep(20, 6)
	if asked[20] != 1 {
		t.Errorf("a forgotten process asked %d times, want 1", asked[20])
	}

	// Unjudged: asked once, the answer kept either way.
	for range 3 {
		if !p.keep(30, 7) {
			t.Error("a young unjudged process's event was dropped")
		}
		if p.keep(31, 7) {
			t.Error("an old unjudged process's event was kept")
		}
	}
	if asked[30] != 1 || asked[31] != 1 {
		t.Errorf("asked %d and %d times, want once each", asked[30], asked[31])
	}
}
