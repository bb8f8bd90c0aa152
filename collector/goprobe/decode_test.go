package goprobe

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/gobin"
)

func TestParseTraceparent(t *testing.T) {
	for in, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":      "4bf92f3577b34da6a3ce929d0e0e4736/00f067aa0ba902b7/1",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-00\r\nX": "4bf92f3577b34da6a3ce929d0e0e4736/00f067aa0ba902b7/0",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":      "", // unknown version
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":      "", // zero trace
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":      "", // zero span
		"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01":      "", // bad hex
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7":         "", // short
		"": "",
	} {
		tid, sid, fl, ok := parseTraceparent([]byte(in))
		got := ""
		if ok {
			got = tid + "/" + sid + "/" + string('0'+fl)
		}
		if got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}

func encodeGo(tb testing.TB, r godeadlineTtGoEvent) []byte {
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.NativeEndian, &r); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func selfProbes(tb testing.TB) *Process {
	bin, err := gobin.Open(os.Args[0])
	if err != nil {
		tb.Skipf("cannot analyse the test binary: %v", err)
	}
	tb.Cleanup(func() { bin.Close() })
	// A logger, as every traced process has (the waiting frames' checks
	// log what they drop; the fuzzer found the nil one).
	return &Process{bin: bin, comm: "test", clk: collector.Clock{HZ: 250}, log: slog.New(slog.DiscardHandler)}
}

func TestDecodeDeadlineTrace(t *testing.T) {
	p := selfProbes(t)
	r := godeadlineTtGoEvent{Kind: 1, Pid: 7, TraceStatus: uint8(godeadlineTtGoTraceStatusTT_TRACE_ROOT)}
	copy(r.Traceparent[:], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	var ev event.Deadline
	if err := p.decode(encodeGo(t, r), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.TraceSource != "http_traceparent" || ev.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || ev.SpanID != "00f067aa0ba902b7" {
		t.Errorf("traceparent not used: %+v", ev)
	}
	// A span found in the chain wins over the header.
	r.TraceStatus = uint8(godeadlineTtGoTraceStatusTT_TRACE_FOUND)
	r.TraceId[0], r.SpanId[7] = 0xab, 0xcd
	if err := p.decode(encodeGo(t, r), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.TraceSource != "otel_context" || ev.TraceID != "ab000000000000000000000000000000" || ev.SpanID != "00000000000000cd" {
		t.Errorf("chain span not used: %+v", ev)
	}
	// Neither: empty, with the reason.
	r.TraceStatus, r.Traceparent = uint8(godeadlineTtGoTraceStatusTT_TRACE_ROOT), [56]uint8{}
	if err := p.decode(encodeGo(t, r), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.TraceID != "" || ev.TraceNote == "" {
		t.Errorf("want no trace and a note: %+v", ev)
	}
}

// FuzzDecodeDeadline: arbitrary samples decode or fail, never panic, and a
// decoded event never carries a half-valid trace.
func FuzzDecodeDeadline(f *testing.F) {
	p := selfProbes(f)
	seed := godeadlineTtGoEvent{Kind: 1, CreatedNs: 5, CreatedPcs: [6]uint64{0x401000, 1}}
	f.Add(encodeGo(f, seed))
	copy(seed.Traceparent[:], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add(encodeGo(f, seed))
	// A waiter with a waiting frame, bound to a connection.
	seed.Waiters, seed.WaiterGoid[0], seed.WaiterFrame[0], seed.WaiterCookie[0], seed.WaiterFd[0] = 1, 7, 2, 0x1234, 5
	seed.WaiterPcs[0] = [12]uint64{0x401000, 0x401010, 0x401020}
	f.Add(encodeGo(f, seed))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var ev event.Deadline
		if err := p.decode(raw, &ev); err != nil {
			return
		}
		if (ev.TraceID == "") != (ev.SpanID == "") || (ev.TraceID != "" && len(ev.TraceID) != 32) {
			t.Fatalf("inconsistent trace: %+v", ev)
		}
	})
}

// The process's start the expiry probe read is on the event's clock: the
// same conversion to wall time as the expiry's own.
func TestDecodeProcStart(t *testing.T) {
	p := selfProbes(t)
	r := godeadlineTtGoEvent{Kind: 1, Pid: 7, TsNs: 5_000_000_000, ProcStartNs: 3_750_000_000}
	var ev event.Deadline
	if err := p.decode(encodeGo(t, r), &ev); err != nil {
		t.Fatal(err)
	}
	if got := ev.Time.Sub(ev.ProcStart); got != 1250*time.Millisecond {
		t.Errorf("expiry - process start = %v, want 1.25s (start %v, expiry %v)", got, ev.ProcStart, ev.Time)
	}
	r.ProcStartNs = 0
	if err := p.decode(encodeGo(t, r), &ev); err != nil {
		t.Fatal(err)
	}
	if !ev.ProcStart.IsZero() {
		t.Errorf("no start read: ProcStart %v, want zero", ev.ProcStart)
	}
}
