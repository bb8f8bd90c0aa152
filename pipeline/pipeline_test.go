package pipeline

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/event"
)

// fakeSources are channels and progress marks a test drives in place of
// the collectors.
type fakeSources struct {
	tcp       chan event.TCP
	deadlines chan event.Deadline
	bindings  chan event.Binding
	local     chan event.Local
	calls     chan event.Call
	marks     [nSources]atomic.Uint64
}

// fakeSink records what the pipeline hands out, in order.
type fakeSink struct {
	Nop
	mu       sync.Mutex
	events   []event.Any
	reports  []correlate.Report
	switches []Switch
	delay    time.Duration // per event: a slow sink
	failAt   uint64        // the event at this time fails
	fail     error
}

func (f *fakeSink) sink() Sink { return f }

func (f *fakeSink) Event(ev event.Any) error {
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	if f.fail != nil && ev.MonoTime() == f.failAt {
		return f.fail
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
	return nil
}

func (f *fakeSink) Report(r *correlate.Report) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reports = append(f.reports, *r)
	return nil
}

func (f *fakeSink) Switch(s Switch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.switches = append(f.switches, s)
	return nil
}

func (f *fakeSink) snapshot() ([]event.Any, []correlate.Report) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events), slices.Clone(f.reports)
}

func newFake(t *testing.T, sink Sink) (*Pipeline, *fakeSources) {
	t.Helper()
	src := &fakeSources{tcp: make(chan event.TCP, 64), deadlines: make(chan event.Deadline, 64), bindings: make(chan event.Binding, 64),
		local: make(chan event.Local, 64), calls: make(chan event.Call, 64)}
	p := newPipeline(Config{Detail: "never"}, sink)
	if err := p.corrStart(); err != nil {
		t.Fatal(err)
	}
	p.in = &inputs{tcp: src.tcp, deadlines: src.deadlines, bindings: src.bindings, local: src.local, calls: src.calls}
	for i := range p.progress {
		p.progress[i] = src.marks[i].Load
	}
	return p, src
}

func run(p *Pipeline) (cancel func(), done <-chan error) {
	ctx, stop := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- p.Run(ctx, nil) }()
	return stop, ch
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

const base = uint64(1000 * time.Second)

// Events of several sources come out in event time, and only once every
// source has said it is past them: a source that lags holds the others'
// events back, however long, and no wall-clock hold releases them early.
func TestRunReleasesOnTheSlowestSourcesWatermark(t *testing.T) {
	var fs fakeSink
	p, src := newFake(t, fs.sink())
	for i := range src.marks {
		src.marks[i].Store(base)
	}
	stop, done := run(p)
	src.tcp <- event.TCP{Mono: base + 30, Kind: event.TCPRTO, PID: 7, Cookie: 1}
	src.tcp <- event.TCP{Mono: base + 10, Kind: event.TCPRTO, PID: 7, Cookie: 1}
	src.bindings <- event.Binding{Mono: base + 20, PID: 7, Cookie: 1, Goid: 3}
	for i := range src.marks {
		if i != srcBindings {
			src.marks[i].Store(base + 100)
		}
	}
	time.Sleep(300 * time.Millisecond) // longer than any wall-clock hold the pipeline used to have
	if evs, _ := fs.snapshot(); len(evs) != 0 {
		t.Fatalf("released %d events while the bindings source was behind them", len(evs))
	}
	src.marks[srcBindings].Store(base + 25)
	waitFor(t, "two events", func() bool { evs, _ := fs.snapshot(); return len(evs) == 2 })
	src.marks[srcBindings].Store(base + 100)
	waitFor(t, "three events", func() bool { evs, _ := fs.snapshot(); return len(evs) == 3 })
	evs, _ := fs.snapshot()
	if got := []uint64{evs[0].MonoTime(), evs[1].MonoTime(), evs[2].MonoTime()}; !slices.Equal(got, []uint64{base + 10, base + 20, base + 30}) {
		t.Fatalf("order %v", got)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// At the end every buffered event is handed out, the pending deadlines are
// reported (their grace window cut short) and the stream ends with a mark,
// even when a slow sink and a source that never says its progress would
// hold it back.
func TestRunShutdownDrainsReportsAndMarks(t *testing.T) {
	fs := fakeSink{delay: 2 * time.Millisecond}
	p, src := newFake(t, fs.sink())
	stop, done := run(p)
	for i := range 50 {
		src.tcp <- event.TCP{Mono: base + uint64(i), Kind: event.TCPActivity, PID: 7, Cookie: 1, Sent: true}
	}
	src.deadlines <- event.Deadline{Mono: base + 60, PID: 7, Ctx: 0xc000, Kind: event.TimerFired}
	time.Sleep(100 * time.Millisecond)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	evs, reports := fs.snapshot()
	if len(evs) != 52 {
		t.Fatalf("%d events handed out, want 50 + 1 + the mark", len(evs))
	}
	if _, ok := evs[len(evs)-1].(*event.Mark); !ok {
		t.Fatalf("the last event is %T, want the end mark", evs[len(evs)-1])
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].MonoTime() < evs[i-1].MonoTime() {
			t.Fatalf("event %d out of order", i)
		}
	}
	if len(reports) != 1 || reports[0].Deadline.Ctx != 0xc000 {
		t.Fatalf("reports %+v, want the one deadline", reports)
	}
}

// A source whose channel closes while the pipeline runs is an error that
// ends Run, said, never a silent stop.
func TestRunSourceThatDies(t *testing.T) {
	var fs fakeSink
	p, src := newFake(t, fs.sink())
	_, done := run(p)
	close(src.tcp)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "kernel event stream ended") {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run went on after its kernel source died")
	}
}

// An event behind the watermark (a source said more than it had) is
// counted and still handed out; a sink error ends Run with that error.
func TestRunLateEventCountedAndSinkError(t *testing.T) {
	boom := errors.New("sink full")
	fs := fakeSink{fail: boom, failAt: base + 500}
	p, src := newFake(t, fs.sink())
	for i := range src.marks {
		src.marks[i].Store(base + 100)
	}
	stop, done := run(p)
	defer stop()
	src.tcp <- event.TCP{Mono: base + 50, Kind: event.TCPRTO, PID: 7, Cookie: 1}
	waitFor(t, "the first event", func() bool { evs, _ := fs.snapshot(); return len(evs) == 1 })
	src.local <- event.Local{Mono: base + 40, Start: base + 30, PID: 7, Kind: event.LocalGCPause} // behind the release
	waitFor(t, "the late event", func() bool { evs, _ := fs.snapshot(); return len(evs) == 2 })
	src.tcp <- event.TCP{Mono: base + 500, Kind: event.TCPRTO, PID: 7, Cookie: 1}
	for i := range src.marks {
		src.marks[i].Store(base + 1000)
	}
	select {
	case err := <-done:
		if !errors.Is(err, boom) {
			t.Fatalf("Run returned %v, want the sink's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run went on after its sink failed")
	}
	if p.Late() != 1 {
		t.Errorf("late %d, want 1", p.Late())
	}
}
