package event

import (
	"testing"
	"time"
	"unsafe"
)

// goTimeWords reads the wall and ext words of a time.Time the way the probes
// read them from a traced process: straight from memory.
func goTimeWords(t time.Time) (uint64, int64) {
	type words struct {
		wall uint64
		ext  int64
		loc  unsafe.Pointer
	}
	w := (*words)(unsafe.Pointer(&t))
	return w.wall, w.ext
}

func TestGoTime(t *testing.T) {
	for name, tm := range map[string]time.Time{
		"monotonic":    time.Now().Add(1500 * time.Millisecond),
		"no monotonic": time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC),
		"past":         time.Date(1999, 1, 1, 0, 0, 0, 1, time.UTC),
		"far future":   time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		wall, ext := goTimeWords(tm)
		if got := GoTime(wall, ext); !got.Equal(tm) {
			t.Errorf("%s: decoded %v, want %v", name, got, tm)
		}
	}
}

// Caller skips the runtime, the standard library's network packages, the
// RPC libraries and OpenTelemetry's instrumentation to the program's own
// frame; a stack of library frames only has none.
func TestWaiterCaller(t *testing.T) {
	w := Waiter{Stack: []string{
		"runtime.gopark (/usr/local/go/src/runtime/proc.go:462)",
		"runtime.selectgo (/usr/local/go/src/runtime/select.go:351)",
		"net/http.(*persistConn).roundTrip (/usr/local/go/src/net/http/transport.go:2911)",
		"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp.(*Transport).RoundTrip (otelhttp/transport.go:268)",
		"net/http.(*Client).Do (/usr/local/go/src/net/http/client.go:592)",
		"github.com/tsenart/vegeta/v12/lib.(*Attacker).hit (lib/attack.go:440)",
		"main.attack (main.go:90)",
	}}
	if got := w.Caller(); got != "github.com/tsenart/vegeta/v12/lib.(*Attacker).hit (lib/attack.go:440)" {
		t.Errorf("Caller %q", got)
	}
	w.Stack = w.Stack[:5]
	if got := w.Caller(); got != "" {
		t.Errorf("library frames only: Caller %q", got)
	}
	d := Deadline{WaitingAt: "x", Waiters: []Waiter{{At: "y", Stack: []string{"main.a"}}, {At: "x", Stack: []string{"runtime.gopark", "main.b"}}}}
	if got := d.CallerAt(); got != "main.b" {
		t.Errorf("CallerAt %q, want the WaitingAt waiter's", got)
	}
}

// TestWaitingPrefersTheCall: without the creator's goroutine, WaitingAt is
// the waiter in a connection's wait frame, not a watcher parked beside it
// (grpcurl: grpc-go's watcher of its reflection stream, the deadline's
// first child, and the call's waitOnHeader in the second).
func TestWaitingPrefersTheCall(t *testing.T) {
	watcher := Waiter{Goid: 7, At: "google.golang.org/grpc.newClientStreamWithParams.func4 (stream.go:393)"}
	call := Waiter{Goid: 1, At: "google.golang.org/grpc/internal/transport.(*Stream).waitOnHeader (transport.go:336)",
		ConnFrame: "google.golang.org/grpc/internal/transport.(*Stream).waitOnHeader"}
	d := Deadline{Waiters: []Waiter{watcher, call}}
	if got := d.Waiting(); got != call.At {
		t.Errorf("Waiting %q, want the call's %q", got, call.At)
	}
	d.CreatedGoid = 7
	if got := d.Waiting(); got != watcher.At {
		t.Errorf("creator's goroutine seen: Waiting %q, want its %q", got, watcher.At)
	}
	d = Deadline{Waiters: []Waiter{watcher, {Goid: 2, At: "main.work (main.go:9)"}}}
	if got := d.Waiting(); got != watcher.At {
		t.Errorf("no connection frame: Waiting %q, want the first %q", got, watcher.At)
	}
}

// TestBudgetFrom: the creation's budget first (the detail tier saw it set),
// then net/http's Client.Timeout read at the expiry, then the span's start;
// none of them: no budget.
func TestBudgetFrom(t *testing.T) {
	deadline := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		d    Deadline
		want time.Duration
		from string
	}{
		{"creation", Deadline{Deadline: deadline, Detail: true, Created: deadline.Add(-200 * time.Millisecond),
			SetBudget: time.Second, SetBudgetFrom: "client_timeout", SpanStart: deadline.Add(-3 * time.Second)}, 200 * time.Millisecond, "creation"},
		{"client timeout", Deadline{Deadline: deadline, SetBudget: time.Second, SetBudgetFrom: "client_timeout", SpanStart: deadline.Add(-3 * time.Second)}, time.Second, "client_timeout"},
		{"timeout handler", Deadline{Deadline: deadline, SetBudget: 300 * time.Millisecond, SetBudgetFrom: "timeout_handler"}, 300 * time.Millisecond, "timeout_handler"},
		{"span", Deadline{Deadline: deadline, SpanStart: deadline.Add(-3 * time.Second), ProcStart: deadline.Add(-4 * time.Second)}, 3 * time.Second, "span_start"},
		{"process", Deadline{Deadline: deadline, ProcStart: deadline.Add(-1010 * time.Millisecond)}, 1010 * time.Millisecond, "process_start"},
		{"process a minute before", Deadline{Deadline: deadline, ProcStart: deadline.Add(-ProcessBudgetMax)}, ProcessBudgetMax, "process_start"},
		{"process longer before", Deadline{Deadline: deadline, ProcStart: deadline.Add(-ProcessBudgetMax - time.Millisecond)}, 0, ""},
		{"process after the deadline", Deadline{Deadline: deadline, ProcStart: deadline.Add(time.Millisecond)}, 0, ""},
		{"span after the deadline", Deadline{Deadline: deadline, SpanStart: deadline.Add(time.Second)}, 0, ""},
		{"none", Deadline{Deadline: deadline}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, from, ok := tc.d.BudgetFrom()
			if ok != (tc.from != "") || b != tc.want || from != tc.from {
				t.Errorf("BudgetFrom() = %v, %q, %v; want %v, %q", b, from, ok, tc.want, tc.from)
			}
		})
	}
}
