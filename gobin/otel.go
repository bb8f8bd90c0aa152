package gobin

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Module paths of OpenTelemetry Go whose types the trace-context walk reads.
const (
	modOTel      = "go.opentelemetry.io/otel"
	modOTelTrace = "go.opentelemetry.io/otel/trace"
	modOTelSDK   = "go.opentelemetry.io/otel/sdk"
	modAutoSDK   = "go.opentelemetry.io/auto/sdk"

	pkgOTelTrace  = "go.opentelemetry.io/otel/trace"
	typeSpanCtx   = pkgOTelTrace + ".SpanContext"
	typeSpanKey   = "trace.traceContextKeyType" // of trace.currentSpanKey
	typeContext   = "context.Context"
	pkgContext    = "context"
	typeValueCtx  = "*context.valueCtx"
	dwarfValueCtx = "context.valueCtx"
)

// otelSpanType is an implementation of trace.Span that holds a
// trace.SpanContext, and so can be what trace.ContextWithSpan stored.
// (trace.noopSpan, the one other implementation in these modules, holds
// none.)
type otelSpanType struct {
	module string // the module defining it, whose version keys the table
	pkg    string // its package path
	name   string // as the runtime prints it; '*' when stored as a pointer
	field  string // the SpanContext field
	start  string // the start time's field (a time.Time), "" when the type records none
}

func otelSpanTypes() []otelSpanType {
	return []otelSpanType{
		// What an SDK tracer starts: sampled, or not (a value type).
		{modOTelSDK, "go.opentelemetry.io/otel/sdk/trace", "*trace.recordingSpan", "spanContext", "startTime"},
		{modOTelSDK, "go.opentelemetry.io/otel/sdk/trace", "trace.nonRecordingSpan", "sc", ""},
		// trace.ContextWithSpanContext / ContextWithRemoteSpanContext: an
		// incoming traceparent that propagation extracted.
		{modOTelTrace, pkgOTelTrace, "trace.nonRecordingSpan", "sc", ""},
		// The noop tracer keeps its parent's SpanContext.
		{modOTelTrace, "go.opentelemetry.io/otel/trace/noop", "noop.Span", "sc", ""},
		// otel.Tracer before a provider is set, and the auto-instrumentation
		// SDK spans.
		{modOTel, "go.opentelemetry.io/otel/internal/global", "global.nonRecordingSpan", "sc", ""},
		{modOTelTrace, pkgOTelTrace, "*trace.autoSpan", "spanContext", ""},
		{modAutoSDK, "go.opentelemetry.io/auto/sdk", "*sdk.span", "spanContext", ""},
	}
}

// dwarfName is the struct's name in DWARF and in the offsets table.
func (s otelSpanType) dwarfName() string {
	return fullTypeName(strings.TrimPrefix(s.name, "*"), s.pkg)
}

// OTelFieldRef names a field of an OpenTelemetry type that the walk reads.
// Module is the module defining Type; its version keys the offsets table.
type OTelFieldRef struct {
	Module string // e.g. "go.opentelemetry.io/otel/trace"
	Type   string // full name as in DWARF, e.g. "go.opentelemetry.io/otel/trace.SpanContext"
	Path   string // dotted field path, e.g. "traceID"
}

// spanContextFields are the trace.SpanContext fields the probes read, in
// the order of SpanContextLayout.
func spanContextFields() [4]string { return [4]string{"traceID", "spanID", "traceFlags", "remote"} }

// OTelProbeFields lists every OpenTelemetry field the probes read: the
// generator of the offsets table resolves exactly these.
func OTelProbeFields() []OTelFieldRef {
	var fs []OTelFieldRef
	for _, f := range spanContextFields() {
		fs = append(fs, OTelFieldRef{modOTelTrace, typeSpanCtx, f})
	}
	for _, s := range otelSpanTypes() {
		fs = append(fs, OTelFieldRef{s.module, s.dwarfName(), s.field})
		if s.start != "" {
			fs = append(fs, OTelFieldRef{s.module, s.dwarfName(), s.start})
		}
	}
	return fs
}

// SpanContextLayout gives the offsets of the fields of a
// go.opentelemetry.io/otel/trace.SpanContext that the probes read.
type SpanContextLayout struct {
	TraceID    int64 // [16]byte
	SpanID     int64 // [8]byte
	TraceFlags int64 // byte; bit 0 is "sampled"
	Remote     int64 // bool: the span context came from a remote parent
}

// OTelSpanType is a span implementation as it sits in a context: the value
// of trace.ContextWithSpan's valueCtx, an `any` whose type word is TypeAddr
// and whose data word points at the span struct.
type OTelSpanType struct {
	Type TypeName
	// TypeAddr is the link-time address of the type descriptor.
	TypeAddr uint64
	// Pointer is true when the interface holds a *T (data word = the
	// pointer); false for a struct stored by value, whose data word points
	// at a heap copy. Either way the data word points at the struct.
	Pointer bool
	// SpanContextOffset is the offset of the trace.SpanContext in the
	// struct the data word points at.
	SpanContextOffset int64
	// StartOffset is the offset of the span's start time (a time.Time) in
	// that struct, -1 when the type records none or its layout is not
	// known: the SDK's recording spans have one.
	StartOffset int64
}

// ContextItab is the itab of a context type whose parent context the
// chain walk follows: a context.Context value whose first word is Itab.Addr
// has a data word pointing at a struct holding the parent Context (itab
// and data words) at ParentOffset.
type ContextItab struct {
	Itab
	ParentOffset int64
	// Value marks *context.valueCtx; its key and val (both `any`: type
	// word, data word) are at KeyOffset and ValOffset.
	Value                bool
	KeyOffset, ValOffset int64
}

// OTelLayout is what a BPF program needs to find the current
// OpenTelemetry span of a context and read its IDs: walk the parent chain
// through ContextItabs to a valueCtx whose key has type SpanKeyType and
// whose val has the type of one of SpanTypes, then read the SpanContext at
// SpanContextOffset in the struct val's data word points at. Addresses are
// link-time: add the load bias of a PIE.
type OTelLayout struct {
	// Modules are the linked OpenTelemetry modules, from the build
	// information: go.opentelemetry.io/otel, /otel/trace, /otel/sdk,
	// go.opentelemetry.io/auto/sdk, those present.
	Modules []Module
	// SpanKeyType is the descriptor address of trace's unexported
	// traceContextKeyType, the type of the key the current span is stored
	// under (the key's data word points at the int 0); 0 when the binary
	// has no such descriptor.
	SpanKeyType uint64
	SpanContext SpanContextLayout
	SpanTypes   []OTelSpanType
	// UnknownSpanTypes are span types the binary has but whose layout is
	// not known (no DWARF, and a module version the table cannot vouch
	// for; SpanContextOffset is -1). They are rare in contexts (e.g. the
	// auto-instrumentation SDK's spans), so they do not fail the layout;
	// a walk that finds one under the span key should stop there rather
	// than read on or report an ancestor's span.
	UnknownSpanTypes []OTelSpanType
	ContextItabs     []ContextItab
	// OffsetsFrom says where the OpenTelemetry offsets came from: "DWARF",
	// or the offsets table entries used, for diagnostics.
	OffsetsFrom string
}

// OTelSpanLayout returns the addresses and offsets that the trace-context
// walk needs (see OTelLayout). Offsets come from DWARF, else from a table
// generated per OpenTelemetry module version (a version between two table
// entries takes the lower one's offsets only if both agree, else
// ErrNoOffsets; span types left without offsets are listed in
// UnknownSpanTypes). It returns ErrNotFound if go.opentelemetry.io/otel/trace
// is not linked or no span type holding a SpanContext is, ErrNoOffsets if
// the SpanContext or every span type lacks offsets, and errors from Itabs
// and ContextItabs.
func (b *Binary) OTelSpanLayout() (*OTelLayout, error) {
	versions := map[string]string{}
	l := &OTelLayout{}
	for _, m := range b.Modules {
		switch m.Path {
		case modOTel, modOTelTrace, modOTelSDK, modAutoSDK:
			l.Modules = append(l.Modules, m)
			versions[m.Path] = moduleVersion(m)
		}
	}
	if _, ok := versions[modOTelTrace]; !ok {
		return nil, fmt.Errorf("OpenTelemetry layout: %s %w in the build information", modOTelTrace, ErrNotFound)
	}
	ts, err := b.typeSection()
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry layout: %w", err)
	}
	itabs, err := ts.itabs()
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry layout: %w", err)
	}
	sources := map[string]bool{}
	offset := func(f OTelFieldRef) (int64, error) {
		off, src, err := b.otelOffset(f, versions[f.Module])
		if err == nil {
			sources[src] = true
		}
		return off, err
	}
	var scOffs [4]int64
	for i, name := range spanContextFields() {
		if scOffs[i], err = offset(OTelFieldRef{modOTelTrace, typeSpanCtx, name}); err != nil {
			return nil, fmt.Errorf("OpenTelemetry layout: %w", err)
		}
	}
	l.SpanContext = SpanContextLayout{TraceID: scOffs[0], SpanID: scOffs[1], TraceFlags: scOffs[2], Remote: scOffs[3]}

	for _, s := range otelSpanTypes() {
		if _, linked := versions[s.module]; !linked {
			continue
		}
		name := TypeName{Name: s.name, PkgPath: s.pkg}
		addr, err := ts.typeAddr(name, itabs)
		if errors.Is(err, ErrNotFound) {
			continue // not in this version, or never stored in an interface
		}
		if err != nil {
			return nil, fmt.Errorf("OpenTelemetry layout: %w", err)
		}
		off, err := offset(OTelFieldRef{s.module, s.dwarfName(), s.field})
		if errors.Is(err, ErrNoOffsets) {
			l.UnknownSpanTypes = append(l.UnknownSpanTypes, OTelSpanType{Type: name, TypeAddr: addr, Pointer: strings.HasPrefix(s.name, "*"), SpanContextOffset: -1, StartOffset: -1})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("OpenTelemetry layout: span type %s: %w", name, err)
		}
		st := OTelSpanType{Type: name, TypeAddr: addr, Pointer: strings.HasPrefix(s.name, "*"), SpanContextOffset: off, StartOffset: -1}
		if s.start != "" {
			// Optional: without it, reports have no budget from the span.
			if so, err := offset(OTelFieldRef{s.module, s.dwarfName(), s.start}); err == nil {
				st.StartOffset = so
			}
		}
		l.SpanTypes = append(l.SpanTypes, st)
	}
	if len(l.SpanTypes) == 0 {
		if len(l.UnknownSpanTypes) > 0 {
			return nil, fmt.Errorf("OpenTelemetry layout: %w for any span type: %v", ErrNoOffsets, l.UnknownSpanTypes)
		}
		return nil, fmt.Errorf("OpenTelemetry layout: no span type holding a SpanContext: %w", ErrNotFound)
	}
	l.SpanKeyType, err = ts.typeAddr(TypeName{Name: typeSpanKey, PkgPath: pkgOTelTrace}, itabs)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("OpenTelemetry layout: %w", err)
	}
	if l.ContextItabs, err = b.contextItabs(itabs); err != nil {
		return nil, fmt.Errorf("OpenTelemetry layout: %w", err)
	}
	var srcs []string
	for s := range sources {
		srcs = append(srcs, s)
	}
	sort.Strings(srcs)
	l.OffsetsFrom = strings.Join(srcs, "; ")
	return l, nil
}

// moduleVersion is the version whose layout a module has: its own, or
// that of a replacement by the same module at another version. A
// replacement by a fork or a directory may have any layout: "".
func moduleVersion(m Module) string {
	if m.Replace == "" {
		return m.Version
	}
	if path, v, ok := strings.Cut(m.Replace, "@"); ok && path == m.Path {
		return v
	}
	return ""
}

// otelOffset resolves one OpenTelemetry field offset for a module at
// version: from DWARF, else from the generated table. It also says where
// the value came from.
func (b *Binary) otelOffset(f OTelFieldRef, version string) (int64, string, error) {
	off, err := b.DWARFFieldOffset(f.Type, f.Path)
	if err == nil {
		return off, "DWARF", nil
	}
	if !errors.Is(err, errNoDWARF) && !errors.Is(err, ErrNotFound) {
		return 0, "", err
	}
	toff, used, terr := otelTableLookup(f, version)
	if terr != nil {
		if !errors.Is(err, errNoDWARF) {
			terr = errors.Join(terr, err)
		}
		return 0, "", terr
	}
	return toff, fmt.Sprintf("table %s@%s", f.Module, used), nil
}

// otelTableLookup finds f for a module version in the generated layouts
// (gobin/layouts/otel.json). A version the layouts lack borrows the offsets
// of the nearest lower version only when the nearest higher one has the
// same offsets for every field of f.Type: the layout did not change across
// the bracket.
func otelTableLookup(f OTelFieldRef, version string) (int64, string, error) {
	return moduleTableOffset("otel", f.Module, version, f.Type, f.Path)
}

// contextWalkTypes are the context implementations whose parent Context the
// walk follows, with the DWARF struct and the parent field. Go 1.21 added
// withoutCancelCtx, afterFuncCtx and stopCtx.
func contextWalkTypes() []struct{ name, dwarf, parent string } {
	return []struct{ name, dwarf, parent string }{
		{"*context.cancelCtx", "context.cancelCtx", "Context"},
		{"*context.timerCtx", "context.timerCtx", "cancelCtx.Context"},
		{typeValueCtx, dwarfValueCtx, "Context"},
		{"context.withoutCancelCtx", "context.withoutCancelCtx", "c"},
		{"*context.afterFuncCtx", "context.afterFuncCtx", "cancelCtx.Context"},
		{"context.stopCtx", "context.stopCtx", "Context"},
	}
}

// ContextItabs returns the context.Context itabs of the context package's
// own types whose parent the trace-context walk follows (*cancelCtx,
// *timerCtx, *valueCtx, withoutCancelCtx, *afterFuncCtx, stopCtx: those
// the binary has), with the offset of the parent field from FieldOffset
// (DWARF, else the Go-release table). A chain reaching any other itab
// (Background, TODO, a user's own context type) ends there. It returns
// ErrNotFound when the binary has no *context.valueCtx itab.
func (b *Binary) ContextItabs() ([]ContextItab, error) {
	itabs, err := b.Itabs()
	if err != nil {
		return nil, fmt.Errorf("context itabs: %w", err)
	}
	return b.contextItabs(itabs)
}

func (b *Binary) contextItabs(itabs []Itab) ([]ContextItab, error) {
	var out []ContextItab
	hasValue := false
	for _, it := range itabs {
		if it.Interface != (TypeName{Name: typeContext, PkgPath: pkgContext}) || it.Type.PkgPath != pkgContext {
			continue
		}
		for _, c := range contextWalkTypes() {
			if it.Type.Name != c.name {
				continue
			}
			ci := ContextItab{Itab: it}
			var err error
			if ci.ParentOffset, err = b.presentFieldOffset(c.dwarf, c.parent); err != nil {
				return nil, fmt.Errorf("context itabs: %w", err)
			}
			if c.name == typeValueCtx {
				ci.Value, hasValue = true, true
				k, err1 := b.presentFieldOffset(dwarfValueCtx, "key")
				v, err2 := b.presentFieldOffset(dwarfValueCtx, "val")
				if err := errors.Join(err1, err2); err != nil {
					return nil, fmt.Errorf("context itabs: %w", err)
				}
				ci.KeyOffset, ci.ValOffset = k, v
			}
			out = append(out, ci)
		}
	}
	if !hasValue {
		return nil, fmt.Errorf("context itabs: %s itab %w", typeValueCtx, ErrNotFound)
	}
	return out, nil
}
