package goprobe

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/timeout-tracer/tracer/event"
)

var goEventSize = int(unsafe.Sizeof(godeadlineTtGoEvent{}))

func (p *Process) decode(raw []byte, out *event.Deadline) error {
	if len(raw) < goEventSize {
		return fmt.Errorf("decode deadline event: %d bytes, want %d", len(raw), goEventSize)
	}
	var r godeadlineTtGoEvent
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&r)), goEventSize), raw)
	kind, cancelled, clientTimer, serverTimer, dialTimer := event.ExpiryKind(r.Kind), false, false, false, false
	switch r.Kind {
	case uint8(godeadlineTtGoExpiryTT_GO_TIMER_FIRED_CANCELLED):
		kind, cancelled = event.TimerFired, true
	case uint8(godeadlineTtGoExpiryTT_GO_CLIENT_TIMER):
		kind, clientTimer = event.TimerFired, true
	case uint8(godeadlineTtGoExpiryTT_GO_SERVER_TIMER):
		kind, serverTimer = event.TimerFired, true
	case uint8(godeadlineTtGoExpiryTT_GO_DIAL_TIMER):
		kind, dialTimer = event.TimerFired, true
	}
	if kind != event.TimerFired && kind != event.ExpiredAtCreation {
		return fmt.Errorf("decode deadline event: unknown kind %d", r.Kind)
	}
	*out = event.Deadline{
		Time:        p.clk.Wall(r.TsNs),
		Mono:        r.TsNs,
		Kind:        kind,
		PID:         r.Pid,
		TID:         r.Tid,
		Comm:        p.comm,
		Goid:        r.Goid,
		Ctx:         r.Ctx,
		Deadline:    event.GoTime(r.DeadlineWall, r.DeadlineExt),
		Children:    r.Children,
		Cancelled:   cancelled,
		ClientTimer: clientTimer,
		ServerTimer: serverTimer,
		DialTimer:   dialTimer,
	}
	if r.ProcStartNs != 0 {
		out.ProcStart = p.clk.Wall(r.ProcStartNs)
	}
	setTrace(&r, out)
	if r.SpanStartWall != 0 || r.SpanStartExt != 0 {
		out.SpanStart = event.GoTime(r.SpanStartWall, r.SpanStartExt)
	}
	if r.TraceStatus == uint8(godeadlineTtGoTraceStatusTT_TRACE_NONE) && out.TraceID == "" && p.otelErr != nil {
		out.TraceNote = "no OpenTelemetry span walk in this binary: " + p.otelErr.Error()
	}
	if out.TraceID == "" && r.CreatedNs == 0 && p.readsInboundTraceparent() {
		out.TraceNote += "; an inbound traceparent is read by the detail tier, which did not see this deadline set (off then)"
	}
	if r.CreatedNs != 0 {
		out.Detail = true
		out.CreatedMono = r.CreatedNs
		out.Created = p.clk.Wall(r.CreatedNs)
		out.CreatedGoid = r.CreatedGoid
		// Each return address expands to its inlined frames (WithDeadline
		// inlined into the caller is its own frame). pc-1: the call
		// instruction, not the return address.
		var pcs []uint64
		for _, pc := range r.CreatedPcs {
			if pc == 0 {
				break
			}
			for _, f := range p.bin.SymbolizeFrames(pc - p.bias - 1) {
				out.CreatedStack = append(out.CreatedStack, f)
				pcs = append(pcs, pc)
			}
		}
		out.CreatedPC, out.CreatedAt = creator(pcs, out.CreatedStack)
	}
	out.SetBudget, out.SetBudgetFrom = p.setBudget(&r)
	out.Waiters = p.waiters(&r)
	out.WaitingAt = out.Waiting()
	out.WaitersRead = p.waitersRead
	return nil
}

// creator picks the frame that set the deadline: the first one outside the
// context package (WithTimeout and WithDeadline are wrappers).
func creator(pcs []uint64, frames []string) (uint64, string) {
	for i, f := range frames {
		if !strings.HasPrefix(f, "context.") {
			return pcs[i], f
		}
	}
	if len(frames) > 0 {
		return pcs[0], frames[0]
	}
	return 0, ""
}

// setTrace fills the trace fields from the chain walk, else from the
// inbound traceparent, and never from anything less certain.
func setTrace(r *godeadlineTtGoEvent, out *event.Deadline) {
	switch r.TraceStatus {
	case uint8(godeadlineTtGoTraceStatusTT_TRACE_FOUND), uint8(godeadlineTtGoTraceStatusTT_TRACE_CHILD_SPAN):
		if tid, sid := hex.EncodeToString(r.TraceId[:]), hex.EncodeToString(r.SpanId[:]); !allZero(r.TraceId[:]) && !allZero(r.SpanId[:]) {
			out.TraceID, out.SpanID, out.TraceSource = tid, sid, "otel_context"
			if r.TraceStatus == uint8(godeadlineTtGoTraceStatusTT_TRACE_CHILD_SPAN) {
				out.TraceSource = "child_span"
			}
			out.TraceSampled = r.TraceFlags&1 != 0
			return
		}
		out.TraceNote = "the span in the context has an invalid (zero) trace or span ID"
	case uint8(godeadlineTtGoTraceStatusTT_TRACE_ROOT):
		out.TraceNote = "no OpenTelemetry span above the deadline in its context"
	case uint8(godeadlineTtGoTraceStatusTT_TRACE_UNKNOWN_CTX):
		out.TraceNote = fmt.Sprintf("context chain walk stopped at an unknown context type (itab %#x)", r.StopItab)
	case uint8(godeadlineTtGoTraceStatusTT_TRACE_TOO_DEEP):
		out.TraceNote = "context chain deeper than the walk's bound"
	default:
		out.TraceNote = "the binary does not link OpenTelemetry"
	}
	if r.TraceparentSrc == uint8(godeadlineTtGoTpSourceTT_TP_STALE) {
		out.TraceNote += "; the traceparent its goroutine inherited was not used: it could not be shown to be this request's (the goroutine that passed it on serves another request now, or the deadline does not descend from its request)"
		return
	}
	if tid, sid, flags, ok := parseTraceparent(r.Traceparent[:]); ok {
		out.TraceID, out.SpanID, out.TraceSource = tid, sid, traceparentSource(r.TraceparentSrc)
		out.TraceSampled = flags&1 != 0
		out.TraceNote = ""
	}
}

// parseTraceparent validates a W3C traceparent ("00-<32 hex>-<16 hex>-<2
// hex>"): a version other than 00, bad hex or all-zero IDs give !ok.
func parseTraceparent(raw []byte) (traceID, spanID string, flags byte, ok bool) {
	s := string(bytes.TrimRight(raw, "\x00"))
	if len(s) < 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return "", "", 0, false
	}
	tid, err1 := hex.DecodeString(s[3:35])
	sid, err2 := hex.DecodeString(s[36:52])
	fl, err3 := hex.DecodeString(s[53:55])
	if err1 != nil || err2 != nil || err3 != nil || allZero(tid) || allZero(sid) || len(s) > 55 && s[55] != 0 && s[55] != '\r' && s[55] != '\n' && s[55] != ' ' && s[55] != '-' {
		return "", "", 0, false
	}
	return strings.ToLower(s[3:35]), strings.ToLower(s[36:52]), fl[0], true
}

func allZero(b []byte) bool {
	for _, v := range b {
		if v != 0 {
			return false
		}
	}
	return true
}

var bindingSize = int(unsafe.Sizeof(gocallsTtGoBinding{}))

func (p *Process) call(r *gocallsTtGoBinding) event.Call {
	c := event.Call{Mono: r.TsNs, Time: p.clk.Wall(r.TsNs), PID: r.Pid, Comm: p.comm, Goid: r.Goid, Cookie: r.Cookie,
		Kind: "http", HasDeadline: r.HasDeadline != 0}
	if c.HasDeadline {
		c.Deadline = event.GoTime(r.DeadlineWall, r.DeadlineExt)
		c.Remaining = c.Deadline.Sub(c.Time)
	}
	if r.TraceFound != 0 && !allZero(r.TraceId[:]) {
		c.TraceID, c.SpanID = hex.EncodeToString(r.TraceId[:]), hex.EncodeToString(r.SpanId[:])
	}
	for _, pc := range r.Pcs {
		if pc == 0 {
			break
		}
		for _, f := range p.bin.SymbolizeFrames(pc - p.bias - 1) {
			if !strings.HasPrefix(f, "net/http.") && !strings.HasPrefix(f, "context.") && !strings.HasPrefix(f, "google.golang.org/grpc") {
				c.Caller = f
				return c
			}
		}
	}
	return c
}

// traceparentSource names where a creation's traceparent came from (the
// trace_source values of the JSON contract).
func traceparentSource(src uint8) string {
	switch src {
	case uint8(godeadlineTtGoTpSourceTT_TP_GRPC):
		return "grpc_metadata"
	case uint8(godeadlineTtGoTpSourceTT_TP_GOROUTINE):
		return "goroutine"
	}
	return "http_traceparent"
}

// setBudget is the budget the probe read from a budget frame (a
// (*Client).send, a (*timeoutHandler).ServeHTTP, a
// net.(*Dialer).DialContext) for a deadline that function's code made from
// a duration, and where from; 0 when none was read or a spill slot it read
// (receiver, request) was not live at that frame's call: a slot not live
// may hold an earlier call's value (counted).
func (p *Process) setBudget(r *godeadlineTtGoEvent) (time.Duration, string) {
	if r.BudgetPc == 0 || r.BudgetNs <= 0 {
		return 0, ""
	}
	var req uint64
	var from string
	switch r.BudgetSrc {
	case uint8(godeadlineTtGoBudgetSrcTT_BUDGET_CLIENT_TIMEOUT):
		req, from = budgetReqClient, "client_timeout"
	case uint8(godeadlineTtGoBudgetSrcTT_BUDGET_TIMEOUT_HANDLER):
		req, from = budgetReqHandler, "timeout_handler"
	case uint8(godeadlineTtGoBudgetSrcTT_BUDGET_DIALER_TIMEOUT):
		// Only the receiver is read from a spill slot: the deadline is
		// proved DialContext's by its deferred cancel, live while its
		// defer bit is set.
		from = "dialer_timeout"
	default:
		return 0, ""
	}
	pc := r.BudgetPc - p.bias - 1
	if err := errors.Join(p.bin.ArgLive(pc, 0), p.bin.ArgLive(pc, req)); err != nil {
		p.mu.Lock()
		p.ext.waitStale++
		p.mu.Unlock()
		p.log.Debug("a deadline's budget not read", "from", from, "err", err)
		return 0, ""
	}
	return time.Duration(r.BudgetNs), from
}
