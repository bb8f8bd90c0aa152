package pipeline

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/export"
)

// A tee hands every value to every sink, in order, even past a sink that
// fails, and returns the failures joined; nested tees flatten, nil sinks
// are left out.
func TestTeeFansOutInOrderPastErrors(t *testing.T) {
	var order []string
	boom := errors.New("boom")
	first := Reports(func(r *correlate.Report) error {
		order = append(order, "first")
		r.Cause.Note = "enriched"
		return boom
	})
	var seen string
	second := Reports(func(r *correlate.Report) error { order = append(order, "second"); seen = r.Cause.Note; return nil })
	var a, b fakeSink
	s := Tee(first, nil, Tee(second, &a), &b)
	if got := len(s.(tee)); got != 4 {
		t.Fatalf("%d sinks in the tee, want 4 (flattened, nil left out)", got)
	}
	err := s.Report(&correlate.Report{})
	if !errors.Is(err, boom) {
		t.Errorf("Report returned %v, want the first sink's error", err)
	}
	if strings.Join(order, ",") != "first,second" || seen != "enriched" {
		t.Errorf("order %v, second saw %q: want first then second, after the first's change", order, seen)
	}
	if len(a.reports) != 1 || len(b.reports) != 1 {
		t.Errorf("reports %d and %d, want 1 each", len(a.reports), len(b.reports))
	}
	ev := &event.TCP{Mono: 5}
	if err := s.Event(ev); err != nil {
		t.Fatal(err)
	}
	if err := s.Switch(Switch{PID: 3, On: true}); err != nil {
		t.Fatal(err)
	}
	if len(a.events) != 1 || len(b.events) != 1 || len(a.switches) != 1 || len(b.switches) != 1 {
		t.Errorf("events %d/%d, switches %d/%d: want every sink to get each", len(a.events), len(b.events), len(a.switches), len(b.switches))
	}
}

// The writer sink writes reports, audit lines and (when asked) detail
// switches; storm switches go to SwitchLines.
func TestWriterAndSwitchLines(t *testing.T) {
	var out, errOut bytes.Buffer
	s := Tee(Writer{W: export.NewTimeoutWriter(&out, export.FormatJSON), Details: true}, SwitchLines{W: &errOut})
	now := time.Unix(1700000000, 0)
	for _, sw := range []Switch{{Time: now, PID: 9, On: true, Reason: "5 expiries"}, {Time: now, PID: 9, Storm: true, On: true, Reason: "too many traps"}} {
		if err := s.Switch(sw); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Audit(&correlate.AuditLine{Kind: correlate.AuditMissing, Call: event.Call{Time: now, PID: 9, Kind: "http"}, Peer: "10.0.0.1:80"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"kind":"detail"`) || !strings.Contains(lines[1], `"kind":"deadline_missing"`) {
		t.Errorf("writer wrote %q, want a detail line and a deadline_missing line", out.String())
	}
	if got := errOut.String(); got != "storm guard: probes detached for pid 9: too many traps\n" {
		t.Errorf("switch lines %q", got)
	}
}

// Switches made off Run's goroutine (the control loop, an attach) reach
// the sink through Run, and those made just before the end still do.
func TestRunDeliversSwitches(t *testing.T) {
	var fs fakeSink
	p, src := newFake(t, fs.sink())
	for i := range src.marks {
		src.marks[i].Store(base)
	}
	p.emit(Switch{PID: 1, On: true, Reason: "before Run"})
	stop, done := run(p)
	waitFor(t, "the first switch", func() bool { fs.mu.Lock(); defer fs.mu.Unlock(); return len(fs.switches) == 1 })
	go p.emit(Switch{PID: 2, Storm: true, On: true, Reason: "from another goroutine"})
	waitFor(t, "the second switch", func() bool { fs.mu.Lock(); defer fs.mu.Unlock(); return len(fs.switches) == 2 })
	p.emit(Switch{PID: 3, Reason: "at the end"})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(fs.switches) != 3 || fs.switches[2].PID != 3 {
		t.Fatalf("switches %+v, want all three", fs.switches)
	}
}
