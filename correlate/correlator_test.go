package correlate

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// Reports come out once the stream passes expiry + grace, not before, and
// Advance moves time without events.
func TestEmissionWaitsForTheGraceWindow(t *testing.T) {
	c, _ := New(Config{})
	d := &event.Deadline{Mono: mono(1000), PID: 1}
	if rs := c.Push(d); len(rs) != 0 {
		t.Fatal("reported at the expiry")
	}
	if rs := c.Push(&event.SockActivity{Mono: mono(1250), PID: 1, Cookie: 9}); len(rs) != 0 {
		t.Fatal("reported at expiry + grace")
	}
	if rs := c.Advance(mono(1250.001)); len(rs) != 1 || rs[0].Deadline.Mono != d.Mono {
		t.Fatalf("Advance past the grace: %d reports", len(rs))
	}
	if rs := c.Flush(); len(rs) != 0 {
		t.Fatal("reported twice")
	}
	c.Push(&event.Deadline{Mono: mono(2000), PID: 1})
	if rs := c.Flush(); len(rs) != 1 {
		t.Fatal("Flush did not report a pending deadline")
	}
}

// An event just past a deadline's grace window must not change its report:
// it is emitted before the event is applied.
func TestReportDoesNotSeeEventsPastTheGrace(t *testing.T) {
	sc := newScenario("t", "")
	c := sc.conn(1, 10, "app", "10.0.0.1:1000", "10.0.0.2:80", 100*time.Microsecond)
	c.act(1000, 5, true)
	sc.deadline(10, "app", 1000, 300, 5, at)
	c.tcp(1300.05+250.001, event.TCPRTO)
	expect(t, one(t, sc), ClassSlowPeer, Exact)
}

// The same input gives byte-identical reports, however the stream is cut
// into Push and Advance calls.
func TestDeterministic(t *testing.T) {
	evs := mixedScenario().events()
	encode := func(advanceEvery int) []byte {
		c, _ := New(Config{})
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		emit := func(rs []Report) {
			for _, r := range rs {
				if err := enc.Encode(r); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i, ev := range evs {
			if advanceEvery > 0 && i%advanceEvery == 0 {
				emit(c.Advance(ev.MonoTime()))
			}
			emit(c.Push(ev))
		}
		emit(c.Flush())
		return buf.Bytes()
	}
	first := encode(0)
	if len(first) == 0 {
		t.Fatal("no output")
	}
	for _, every := range []int{0, 1, 7} {
		if got := encode(every); !bytes.Equal(got, first) {
			t.Errorf("output differs with Advance every %d events", every)
		}
	}
}

// Every table is capped and every eviction counted.
func TestBoundedStateCountsEvictions(t *testing.T) {
	c, err := New(Config{MaxSockets: 16, MaxEventsPerSocket: 4, MaxActivityPerSocket: 2, MaxGoroutines: 8,
		MaxBindingsPerGoroutine: 2, MaxProcesses: 4, MaxPending: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		ms := float64(i)
		c.Push(&event.SockActivity{Mono: mono(ms), PID: uint32(1 + i%10), Cookie: uint64(1 + i%40), Goid: uint64(1 + i%20)})
		c.Push(&event.TCP{Mono: mono(ms), Kind: event.TCPRTO, PID: uint32(1 + i%10), Cookie: 1})
		c.Push(&event.Binding{Mono: mono(ms), PID: 1, Goid: 1, Cookie: uint64(1 + i%40), Source: event.BindHTTPRoundTrip})
	}
	for g := range 20 {
		c.Push(&event.Binding{Mono: mono(100), PID: 99, Goid: uint64(100 + g), Cookie: 77, Source: event.BindKernelG})
	}
	if st := c.Stats(); st.LiveGoroutines > 8 || st.GoroutinesEvicted < 12 {
		t.Errorf("goroutine cap: %+v", st)
	}
	// Activity on one socket far apart: new intervals each time.
	for i := range 5 {
		c.Push(&event.SockActivity{Mono: mono(200 + float64(i)*3000), PID: 1, Cookie: 1})
	}
	for i := range 5 {
		c.Push(&event.Deadline{Mono: mono(15000), PID: 1, Ctx: uint64(i)})
	}
	st := c.Stats()
	for name, v := range map[string]uint64{
		"sockets": st.SocketsEvicted, "events": st.EventsEvicted, "activity": st.ActivityEvicted,
		"goroutines": st.GoroutinesEvicted, "bindings": st.BindingsEvicted, "processes": st.ProcessesEvicted,
		"early reports": st.ReportsEarly,
	} {
		if v == 0 {
			t.Errorf("no %s evicted: %+v", name, st)
		}
	}
	if st.LiveSockets > 16 || st.LiveGoroutines > 8 || st.LiveProcesses > 4 || st.Pending > 3 {
		t.Errorf("caps exceeded: %+v", st)
	}
	if st.Reports != 2 {
		t.Errorf("%d early reports, want 2", st.Reports)
	}
}

// Idle sockets expire; closed ones linger, then go.
func TestSocketsExpire(t *testing.T) {
	c, _ := New(Config{IdleTimeout: 2 * time.Minute, ClosedLinger: 10 * time.Second})
	c.Push(&event.TCP{Mono: mono(0), Kind: event.TCPEstablished, PID: 1, Cookie: 1})
	c.Push(&event.TCP{Mono: mono(0), Kind: event.TCPEstablished, PID: 1, Cookie: 2})
	c.Push(&event.TCP{Mono: mono(1), Kind: event.TCPClose, PID: 1, Cookie: 2})
	c.Advance(mono(5_000))
	if st := c.Stats(); st.LiveSockets != 2 {
		t.Fatalf("a closed socket went before its linger: %+v", st)
	}
	c.Advance(mono(12_000))
	if st := c.Stats(); st.LiveSockets != 1 || st.SocketsClosed != 1 {
		t.Fatalf("closed socket kept past its linger: %+v", st)
	}
	c.Advance(mono(119_000))
	if st := c.Stats(); st.LiveSockets != 1 || st.LiveProcesses != 1 {
		t.Fatalf("socket or process expired early: %+v", st)
	}
	c.Advance(mono(121_000))
	if st := c.Stats(); st.LiveSockets != 0 || st.SocketsIdle != 1 || st.LiveProcesses != 0 || st.ProcessesIdle != 1 {
		t.Fatalf("idle socket or process kept: %+v", st)
	}
}

func TestOutOfOrderIsCounted(t *testing.T) {
	c, _ := New(Config{})
	c.Push(&event.SockActivity{Mono: mono(10), PID: 1, Cookie: 1})
	c.Push(&event.SockActivity{Mono: mono(5), PID: 1, Cookie: 1})
	c.Push(&event.TCP{Mono: mono(6), Kind: event.TCPRTO})
	if st := c.Stats(); st.OutOfOrder != 2 || st.Unjoinable != 1 {
		t.Errorf("%+v", st)
	}
}

// A queue of pending deadlines that never drains stays small.
func TestPendingQueueDoesNotGrow(t *testing.T) {
	c, _ := New(Config{})
	for i := range 100_000 {
		c.Push(&event.Deadline{Mono: mono(float64(i)), PID: 1})
	}
	if n := c.Stats().Pending; n > 260 {
		t.Errorf("%d pending", n)
	}
	if cp := cap(c.pending); cp > 4096 {
		t.Errorf("pending queue grew to %d", cp)
	}
}

func TestConfig(t *testing.T) {
	if _, err := New(Config{Grace: -1}); err == nil || !strings.Contains(err.Error(), "Grace") {
		t.Errorf("negative grace: %v", err)
	}
	if _, err := New(Config{MaxSockets: -1}); err == nil {
		t.Error("negative cap accepted")
	}
	c, _ := New(Config{Lookback: 3 * time.Second})
	if got := c.Config(); got.ClosedLinger != 3*time.Second || got.Grace != 250*time.Millisecond || got.MaxSockets != 16384 {
		t.Errorf("defaults: %+v", got)
	}
}

// The hot path — TCP events, activity and bindings on known sockets and
// goroutines — allocates nothing.
func TestHotPathDoesNotAllocate(t *testing.T) {
	c, _ := New(Config{})
	tcp := &event.TCP{Kind: event.TCPFastRetransmit, PID: 7, Cookie: 1, SRTT: time.Millisecond}
	act := &event.SockActivity{PID: 7, Cookie: 2, Goid: 9, Sent: true}
	tact := &event.TCP{Kind: event.TCPActivity, PID: 7, Cookie: 3, Goid: 10}
	bind := &event.Binding{PID: 7, Goid: 9, Cookie: 2, Source: event.BindKernelG}
	t0 := mono(0)
	step := func() {
		t0 += 1000
		tcp.Mono, act.Mono, tact.Mono, bind.Mono = t0, t0, t0, t0
		c.Push(tcp)
		c.Push(act)
		c.Push(tact)
		c.Push(bind)
	}
	for range 200 { // fill the rings
		step()
	}
	if n := testing.AllocsPerRun(1000, step); n != 0 {
		t.Errorf("%v allocations per 4 events", n)
	}
}

// NextDue names the first stream time at which Advance reports the
// waiting deadline, and nothing before.
func TestNextDue(t *testing.T) {
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.NextDue(); ok {
		t.Fatal("due with nothing waiting")
	}
	c.Push(&event.Deadline{Mono: 1000, PID: 1, Ctx: 1, Kind: event.TimerFired})
	due, ok := c.NextDue()
	if !ok {
		t.Fatal("nothing due after an expiry")
	}
	if n := len(c.Advance(due - 1)); n != 0 {
		t.Fatalf("%d reports before the due time", n)
	}
	if n := len(c.Advance(due)); n != 1 {
		t.Fatalf("%d reports at the due time, want 1", n)
	}
	if _, ok := c.NextDue(); ok {
		t.Fatal("still due after the report")
	}
}
