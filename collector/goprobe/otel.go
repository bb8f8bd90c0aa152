package goprobe

import (
	"fmt"

	"github.com/timeout-tracer/tracer/gobin"
)

// resolveOTel finds what the chain walk needs to read OpenTelemetry spans.
// A binary without OpenTelemetry, or one whose layout cannot be known for
// sure, gets no walk: empty trace IDs with the reason, never a guess.
func (p *Process) resolveOTel(offs *godeadlineTtGoOffsets) {
	l, err := p.bin.OTelSpanLayout()
	if err != nil {
		p.otelErr = err
		p.log.Debug("no trace context from OpenTelemetry spans", "pid", p.pid, "err", err)
		return
	}
	parent, err := p.bin.FieldOffset("context.timerCtx", "cancelCtx.Context")
	if err != nil {
		p.otelErr = err
		return
	}
	for _, ci := range l.ContextItabs {
		if ci.Value {
			offs.ValuectxVal = uint32(ci.ValOffset)
			offs.ValuectxKey = uint32(ci.KeyOffset)
		}
	}
	if l.SpanKeyType != 0 {
		offs.SpanKeyType = l.SpanKeyType + p.bias
	}
	offs.TimerctxParent = uint32(parent)
	offs.ScTraceId = uint32(l.SpanContext.TraceID)
	offs.ScSpanId = uint32(l.SpanContext.SpanID)
	offs.ScFlags = uint32(l.SpanContext.TraceFlags)
	offs.HasOtel = 1
	p.otel = l
	if fn, err := p.bin.Func("go.opentelemetry.io/otel/sdk/trace.(*tracer).Start"); err == nil {
		if rets, err := p.bin.Returns(fn); err == nil {
			for _, a := range rets {
				p.spanSites = append(p.spanSites, site{"go_span_start_ret", p.objs.GoSpanStartRet, a})
			}
		}
	}
}

// registerOTel gives the BPF programs the runtime addresses (link-time plus
// the PIE load bias) of the context and span types of the layout.
func (p *Process) registerOTel() error {
	pid := uint32(p.pid)
	itabs := p.objs.GoCtxItabs
	var ctxItabs []gobin.ContextItab
	if p.otel != nil {
		ctxItabs = p.otel.ContextItabs
	} else if cis, err := p.bin.ContextItabs(); err == nil {
		ctxItabs = cis // no OpenTelemetry: the audit still walks contexts for deadlines
	} else {
		p.log.Info("no context walk: the audit cannot tell calls without a deadline", "err", err)
		return nil
	}
	p.ctxWalk = true
	for _, ci := range ctxItabs {
		v := godeadlineTtGoCtxItab{ParentOff: uint32(ci.ParentOffset)}
		if ci.Value {
			v.IsValue = 1
		}
		if ci.Type.Name == "*context.timerCtx" {
			v.IsTimer = 1
		}
		if ci.Type.Name == "context.withoutCancelCtx" {
			v.NoDeadline = 1
		}
		if err := itabs.Put(godeadlinePidPtr{Pid: pid, Ptr: ci.Addr + p.bias}, v); err != nil {
			return fmt.Errorf("register context type %s: %w", ci.Type.Name, err)
		}
	}
	// Root contexts end the walk with "no span" rather than "unknown type".
	if all, err := p.bin.Itabs(); err == nil {
		for _, it := range all {
			if it.Interface.Name == "context.Context" && it.Type.PkgPath == "context" &&
				(it.Type.Name == "context.backgroundCtx" || it.Type.Name == "context.todoCtx" || it.Type.Name == "*context.emptyCtx") {
				itabs.Put(godeadlinePidPtr{Pid: pid, Ptr: it.Addr + p.bias}, godeadlineTtGoCtxItab{ParentOff: uint32(godeadlineTtGoNoOffsetTT_GO_ROOT_CTX)})
			}
		}
	}
	if p.otel == nil {
		return nil
	}
	for _, st := range p.otel.SpanTypes {
		v := godeadlineTtGoSpanType{ScOff: uint32(st.SpanContextOffset)}
		if st.StartOffset >= 0 {
			v.StartOff = uint32(st.StartOffset) + 1
		}
		if err := p.objs.GoSpanTypes.Put(godeadlinePidPtr{Pid: pid, Ptr: st.TypeAddr + p.bias}, v); err != nil {
			return fmt.Errorf("register span type %s: %w", st.Type.Name, err)
		}
	}
	// A span whose layout is unknown stops the walk: reading on would
	// report an ancestor's span as the request's.
	for _, st := range p.otel.UnknownSpanTypes {
		if err := p.objs.GoSpanTypes.Put(godeadlinePidPtr{Pid: pid, Ptr: st.TypeAddr + p.bias},
			godeadlineTtGoSpanType{ScOff: uint32(godeadlineTtGoNoOffsetTT_GO_SPAN_UNKNOWN)}); err != nil {
			return fmt.Errorf("register span type %s: %w", st.Type.Name, err)
		}
	}
	return nil
}
