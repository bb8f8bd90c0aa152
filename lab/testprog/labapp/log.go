package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// Outcomes of one request, as logged.
const (
	outcomeOK               = "ok"
	outcomeDeadlineExceeded = "deadline_exceeded"
	outcomeRemoteDeadline   = "remote_deadline_exceeded" // the peer's deadline answered first
	outcomeCanceled         = "canceled"                 // server side: the caller went away
	outcomeError            = "error"
)

// clientLine is the record of one client request.
type clientLine struct {
	Side   string `json:"side"` // always "client"
	Proto  string `json:"proto"`
	Seq    int    `json:"seq"`
	Target string `json:"target"` // the server this request went to
	// TraceID is the trace the request belongs to (32 hex), empty without
	// OTel.
	TraceID string `json:"trace_id"`
	// SpanID is the span that was current when the deadline was set (16
	// hex): set with -span=before only.
	SpanID string `json:"span_id"`
	// CallSpanID is the parent span ID sent in the traceparent header or
	// metadata: the client span otelhttp/otelgrpc started, or the one in a
	// fixed -traceparent.
	CallSpanID string `json:"call_span_id,omitempty"`
	// Span is how -span=mixed opened this request's span: before, inside
	// or none.
	Span string `json:"span,omitempty"`
	// Deadline is the request's context deadline (RFC 3339, UTC, to the
	// nanosecond): the tracer reports the same instant, so a report is
	// joined to its request exactly.
	Deadline   string  `json:"deadline,omitempty"`
	Outcome    string  `json:"outcome"`
	Error      string  `json:"error"`
	DurationMS float64 `json:"duration_ms"`
}

// serverLine is the record of one handled request.
type serverLine struct {
	Side  string `json:"side"` // always "server"
	Proto string `json:"proto"`
	// TraceID comes from the server span with OTel, else from an inbound
	// traceparent; empty when there is neither.
	TraceID string `json:"trace_id"`
	// SpanID is the server span, current when a -deadline is set; empty
	// without OTel.
	SpanID string `json:"span_id"`
	// Deadline is the handler's own deadline (-deadline), as the client's
	// line has it.
	Deadline   string  `json:"deadline,omitempty"`
	Outcome    string  `json:"outcome"`
	Error      string  `json:"error"`
	DurationMS float64 `json:"duration_ms"`
}

// summaryLine is the client's last line: how many requests ended how.
type summaryLine struct {
	Summary                bool `json:"summary"`
	OK                     int  `json:"ok"`
	DeadlineExceeded       int  `json:"deadline_exceeded"`
	RemoteDeadlineExceeded int  `json:"remote_deadline_exceeded"`
	Error                  int  `json:"error"`
}

// lineWriter writes whole lines, one Write each, so that concurrent
// requests never interleave their records.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func newLineWriter(w io.Writer) *lineWriter {
	return &lineWriter{w: w}
}

// json writes v as one JSON line.
func (l *lineWriter) json(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %T: %w", v, err)
	}
	return l.line(string(b))
}

// line writes s and a newline.
func (l *lineWriter) line(s string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := io.WriteString(l.w, s+"\n"); err != nil {
		return fmt.Errorf("write line: %w", err)
	}
	return nil
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// errorText is err's message, or "" for nil.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
