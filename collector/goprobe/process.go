package goprobe

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/gobin"
)

// Config tunes the Go deadline probes.
type Config struct {
	PID int
	// PollInterval is the reader's safety net (see NodeConfig); 0 means
	// 1 s.
	PollInterval time.Duration
	Logger       *slog.Logger
	// tap, if set, sees every raw sample of both ring buffers before it is
	// decoded (tests capture real records for the fuzz corpora with it).
	tap func(ring string, raw []byte)
}

// Stats are the probes' counters.
type Stats struct {
	ExpiryHits       uint64 // cold-tier probe hits (expiries, and nothing else)
	CreateHits       uint64 // detail-tier hits: WithDeadlineCause entries
	ReturnHits       uint64 // detail-tier hits: WithDeadlineCause returns
	Dropped          uint64 // expiries lost: ring buffer full
	DetailFull       uint64 // creations not recorded: table full
	HeaderHits       uint64 // detail-tier hits: net/http header keys parsed (inbound traceparent)
	RequestHits      uint64 // detail-tier hits: net/http requests read
	SpanHits         uint64 // detail-tier hits: OpenTelemetry spans started
	RoundTripHits    uint64 // detail-tier hits: net/http client round trips
	GRPCHeaderHits   uint64 // detail-tier hits: gRPC server HEADERS frames (inbound metadata)
	GRPCStreamHits   uint64 // detail-tier hits: gRPC client streams opened
	DialHits         uint64 // detail-tier hits: connects (entry, after connect(2), returns)
	NewprocHits      uint64 // detail-tier hits: goroutines started (runtime.newproc1 entry and returns)
	Swept            uint64 // recorded creations removed because their deadline passed unseen (met in time)
	DecodeErrors     uint64
	LateCookieErrors uint64 // bound connections whose cookie could not be asked of the kernel (see lateCookie)
	Duplicates       uint64 // expiries delivered twice by probes shared through overlayfs, reported once
	UnknownPID       uint64 // events of a process not traced (any more): dropped
	// Missed counts probe runs the kernel skipped because a BPF program of
	// the kprobe family was already running on that CPU (its recursion
	// guard); a skipped expiry probe is an expiry not reported.
	Missed uint64
}

// Process traces the context deadline expiries of one Go process: the cold
// tier is attached for its whole life; the detail tier on demand. Its BPF
// programs, maps and ring buffers belong to a Node that may serve many
// processes (the node agent); Start makes a private one.
type Process struct {
	log  *slog.Logger
	pid  int
	comm string
	bin  *gobin.Binary
	clk  collector.Clock
	objs *objects // the node's
	node *Node
	own  bool // Start's private node: Close closes it
	exe  *link.Executable
	key  gobin.FileID // the executable's inode: cold probes are shared by it

	bias uint64 // PIE load bias: runtime PC - bias = link-time PC

	// detail sites, resolved once
	cold      []site
	entry     uint64
	returns   []uint64
	httpSites []site // inbound traceparent of net/http servers; none without net/http
	spanSites []site // spans started below a deadline; none without the OTel SDK
	tripSites []site // net/http client round trips: request -> connection
	otel      *gobin.OTelLayout
	ext       extProbes // gRPC, dial and goroutine probes (grpc.go, dial.go)

	otelErr   error // why there is no OpenTelemetry walk
	ctxWalk   bool  // context itabs are registered: the walk can find deadlines
	mu        sync.Mutex
	detail    []link.Link
	audit     []link.Link // call probes attached by SetAudit
	closeOnce sync.Once
	closeErr  error
}

// ErrNotTraceable is wrapped when the target cannot be traced (not Go, too
// old, no context package in it, ...); the message says why.
var ErrNotTraceable = errors.New("cannot trace this process")

// Start analyses the process's executable, loads the deadline programs
// and attaches the cold tier, for this process only. On error nothing is
// left attached.
func Start(cfg Config) (*Process, error) {
	n, err := NewNode(NodeConfig{PollInterval: cfg.PollInterval, Logger: cfg.Logger, tap: cfg.tap})
	if err != nil {
		return nil, err
	}
	p, err := n.add(cfg.PID, false)
	if err != nil {
		n.Close()
		return nil, err
	}
	p.own = true
	return p, nil
}

// attach analyses the process's binary, registers it with the BPF maps and
// attaches its cold tier (shared with other processes of the same
// executable when shared is set). On error it undoes what it did.
func (p *Process) attach(shared bool) (err error) {
	bin, attachPath, err := p.node.openBin(p.pid)
	if err != nil {
		return fmt.Errorf("%w: process %d: %w", ErrNotTraceable, p.pid, err)
	}
	p.bin, p.key = bin, bin.File
	if p.bias, err = loadBias(p.pid, bin); err != nil {
		p.log.Warn("creators will not be symbolized", "pid", p.pid, "err", err)
	}
	offs, err := p.resolve()
	if err != nil {
		return fmt.Errorf("%w: process %d (%s, %s): %w", ErrNotTraceable, p.pid, bin.ExePath, bin.GoVersion, err)
	}
	if err := p.objs.GoProcs.Put(uint32(p.pid), offs); err != nil {
		return fmt.Errorf("register process %d: %w", p.pid, err)
	}
	if err := p.registerOTel(); err != nil {
		return err
	}
	if err := p.registerExt(); err != nil {
		return err
	}
	if p.exe, err = link.OpenExecutable(attachPath); err != nil {
		return fmt.Errorf("open executable %s: %w", attachPath, err)
	}
	return p.node.holdCold(p, shared)
}

// resolve finds the probe sites and the struct offsets in the binary.
func (p *Process) resolve() (godeadlineTtGoOffsets, error) {
	var offs godeadlineTtGoOffsets
	ds, err := p.bin.DeadlineSites()
	if err != nil {
		return offs, err
	}
	cancel, err := p.bin.Func("context.(*timerCtx).cancel")
	if err != nil {
		return offs, err
	}
	fired, err := p.bin.CallSites(ds.Timer, cancel)
	if err != nil {
		return offs, fmt.Errorf("find the cancel call in %s: %w", ds.Timer.Name, err)
	}
	if len(fired) == 0 {
		return offs, fmt.Errorf("no cancel call in the timer closure %s", ds.Timer.Name)
	}
	var sites []site
	for _, a := range fired {
		sites = append(sites, site{"go_timer_fired", p.objs.GoTimerFired, a})
	}
	for _, c := range ds.CancelCalls {
		if c.Expired {
			sites = append(sites, site{"go_expired_at_creation", p.objs.GoExpiredAtCreation, c.Addr})
		}
	}
	p.cold = sites
	if p.entry, err = p.bin.AfterPrologue(ds.Constructor); err != nil {
		return offs, err
	}
	if p.returns, err = p.bin.Returns(ds.Constructor); err != nil || len(p.returns) == 0 {
		return offs, fmt.Errorf("find the returns of %s: %v", ds.Constructor.Name, err)
	}
	p.httpSites = p.resolveHTTP()
	p.resolveOTel(&offs)
	p.resolveRoundTrip(&offs)
	p.resolveExt()
	for _, f := range []struct {
		typ, path string
		dst       *uint32
	}{
		{"context.timerCtx", "deadline", &offs.TimerctxDeadline},
		{"context.cancelCtx", "err", &offs.CancelctxErr},
		{"context.cancelCtx", "children", &offs.CancelctxChildren},
		{"runtime.g", "goid", &offs.G_goid},
	} {
		off, err := p.bin.FieldOffset(f.typ, f.path)
		if err != nil {
			return offs, err
		}
		*f.dst = uint32(off)
	}
	return offs, nil
}

func (p *Process) uprobe(s site) (link.Link, error) {
	return p.node.attachUprobe(p, s, p.pid)
}

// SetDetail attaches (on) or detaches (off) the detail tier: a uprobe at
// WithDeadlineCause's entry and at each of its returns. It costs a trap on
// every deadline the process sets.
func (p *Process) SetDetail(on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == (p.detail != nil) {
		return nil
	}
	if !on {
		err := collector.CloseLinks(p.detail)
		p.detail = nil
		return err
	}
	var ls []link.Link
	attach := func(s site) error {
		l, err := p.uprobe(s)
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return err
		}
		ls = append(ls, l)
		return nil
	}
	for _, a := range p.returns {
		if err := attach(site{"go_create_ret", p.objs.GoCreateRet, a}); err != nil {
			return err
		}
	}
	sites := append(append([]site(nil), p.httpSites...), p.spanSites...)
	for _, s := range p.ext.sites {
		if s.prog != p.objs.calls.GoGrpcNewStream { // a call site: below
			sites = append(sites, s)
		}
	}
	if p.audit == nil { // the audit's call probes already see every call
		sites = append(sites, p.callSites()...)
	}
	for _, s := range sites {
		if err := attach(s); err != nil {
			return err
		}
	}
	// Entry last: a record is only made once its returns are watched.
	if err := attach(site{"go_create_entry", p.objs.GoCreateEntry, p.entry}); err != nil {
		return err
	}
	p.detail = ls
	return nil
}

// Detail reports whether the detail tier is attached.
func (p *Process) Detail() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.detail != nil
}

// Events delivers one event per expired deadline, of every process of the
// node. Closed after the node closes.
func (p *Process) Events() <-chan event.Deadline { return p.node.events }

// Binary is the analysed executable of the traced process.
func (p *Process) Binary() *gobin.Binary { return p.bin }

// Node is the programs and maps the process is traced with.
func (p *Process) Node() *Node { return p.node }

// Key is the executable file the process runs (device, inode): the cold
// probes are shared by the processes with the same key.
func (p *Process) Key() gobin.FileID { return p.key }

// PID is the traced process.
func (p *Process) PID() int { return p.pid }

var goEventSize = int(unsafe.Sizeof(godeadlineTtGoEvent{}))

func (p *Process) decode(raw []byte, out *event.Deadline) error {
	if len(raw) < goEventSize {
		return fmt.Errorf("decode deadline event: %d bytes, want %d", len(raw), goEventSize)
	}
	var r godeadlineTtGoEvent
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&r)), goEventSize), raw)
	kind := event.ExpiryKind(r.Kind)
	if kind != event.TimerFired && kind != event.ExpiredAtCreation {
		return fmt.Errorf("decode deadline event: unknown kind %d", r.Kind)
	}
	*out = event.Deadline{
		Time:     p.clk.Wall(r.TsNs),
		Mono:     r.TsNs,
		Kind:     kind,
		PID:      r.Pid,
		TID:      r.Tid,
		Comm:     p.comm,
		Goid:     r.Goid,
		Ctx:      r.Ctx,
		Deadline: event.GoTime(r.DeadlineWall, r.DeadlineExt),
		Children: r.Children,
	}
	setTrace(&r, out)
	if r.TraceStatus == uint8(godeadlineTtGoTraceStatusTT_TRACE_NONE) && out.TraceID == "" && p.otelErr != nil {
		out.TraceNote = "no OpenTelemetry span walk in this binary: " + p.otelErr.Error()
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
	return nil
}

// Stats returns the probes' counters: the node's, which are this
// process's when it has the node to itself (Start).
func (p *Process) Stats() (Stats, error) { return p.node.Stats() }

// Close detaches every probe of the process and forgets it; with Start's
// private node it frees the node too. Safe to call more than once.
func (p *Process) Close() error {
	p.closeOnce.Do(func() {
		if p.own {
			p.closeErr = p.node.Close()
			return
		}
		p.closeErr = p.node.Remove(p.pid)
	})
	return p.closeErr
}

// detach undoes attach: probes, map entries, the binary. Called by the
// node with the process out of its table.
func (p *Process) detach() error {
	errs := []error{p.SetDetail(false), p.SetAudit(false), p.node.releaseCold(p)}
	p.node.forget(uint32(p.pid))
	return errors.Join(errs...)
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

// resolveHTTP finds where a net/http server parses request headers. Absent
// (no net/http server in the binary, or the function was inlined away)
// means no traceparent from headers, which is logged, not fatal.
func (p *Process) resolveHTTP() []site {
	var sites []site
	for _, s := range []struct {
		name string
		prog *ebpf.Program
		fn   string
	}{
		{"go_http_request", p.objs.traceparent.GoHttpRequest, "net/http.readRequest"},
		{"go_http_header", p.objs.traceparent.GoHttpHeader, "net/textproto.canonicalMIMEHeaderKey"},
	} {
		fn, err := p.bin.Func(s.fn)
		if err != nil {
			p.log.Debug("no inbound traceparent from net/http", "missing", s.fn, "err", err)
			return nil
		}
		addr, err := p.bin.AfterPrologue(fn)
		if err != nil {
			p.log.Debug("no inbound traceparent from net/http", "func", s.fn, "err", err)
			return nil
		}
		sites = append(sites, site{s.name, s.prog, addr})
	}
	return sites
}

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
		if err := itabs.Put(godeadlinePidPtr{Pid: pid, Ptr: ci.Addr + p.bias}, v); err != nil {
			return fmt.Errorf("register context type %s: %w", ci.Type.Name, err)
		}
	}
	// Root contexts end the walk with "no span" rather than "unknown type".
	if all, err := p.bin.Itabs(); err == nil {
		for _, it := range all {
			if it.Interface.Name == "context.Context" && it.Type.PkgPath == "context" &&
				(it.Type.Name == "context.backgroundCtx" || it.Type.Name == "context.todoCtx" || it.Type.Name == "*context.emptyCtx") {
				itabs.Put(godeadlinePidPtr{Pid: pid, Ptr: it.Addr + p.bias}, godeadlineTtGoCtxItab{ParentOff: rootCtx})
			}
		}
	}
	if p.otel == nil {
		return nil
	}
	for _, st := range p.otel.SpanTypes {
		if err := p.objs.GoSpanTypes.Put(godeadlinePidPtr{Pid: pid, Ptr: st.TypeAddr + p.bias},
			godeadlineTtGoSpanType{ScOff: uint32(st.SpanContextOffset)}); err != nil {
			return fmt.Errorf("register span type %s: %w", st.Type.Name, err)
		}
	}
	// A span whose layout is unknown stops the walk: reading on would
	// report an ancestor's span as the request's.
	for _, st := range p.otel.UnknownSpanTypes {
		if err := p.objs.GoSpanTypes.Put(godeadlinePidPtr{Pid: pid, Ptr: st.TypeAddr + p.bias},
			godeadlineTtGoSpanType{ScOff: spanUnknown}); err != nil {
			return fmt.Errorf("register span type %s: %w", st.Type.Name, err)
		}
	}
	return nil
}

// rootCtx is TT_GO_ROOT_CTX: the walk ends at this context.
const rootCtx = 0xffffffff

// spanUnknown is TT_GO_SPAN_UNKNOWN: a span type without a known layout.
const spanUnknown = 0xffffffff

// UprobeHits is the number of uprobe traps the process has taken from these
// probes: what a request pays.
func (s Stats) UprobeHits() uint64 {
	return s.ExpiryHits + s.CreateHits + s.ReturnHits + s.HeaderHits + s.RequestHits + s.SpanHits + s.RoundTripHits +
		s.GRPCHeaderHits + s.GRPCStreamHits + s.DialHits + s.NewprocHits
}

// resolveRoundTrip finds what binding a net/http request to its connection
// needs: persistConn.roundTrip, the field chain persistConn.conn ->
// *net.TCPConn -> netFD -> Sysfd, and *net.TCPConn's itab. Missing pieces
// mean no such bindings (logged), never a wrong one.
func (p *Process) resolveRoundTrip(offs *godeadlineTtGoOffsets) {
	fn, err := p.bin.Func("net/http.(*persistConn).roundTrip")
	if err != nil {
		return // no net/http client in this program
	}
	addr, err := p.bin.AfterPrologue(fn)
	if err != nil {
		p.log.Info("no net/http call probes", "err", err)
		return
	}
	rc, err := p.bin.FieldOffset("net/http.Request", "ctx")
	if err != nil {
		p.log.Info("no net/http call probes", "err", err)
		return
	}
	offs.RequestCtx = uint32(rc)
	p.tripSites = append(p.tripSites, site{"go_http_roundtrip", p.objs.calls.GoHttpRoundtrip, addr})
	if rets, err := p.bin.Returns(fn); err == nil {
		for _, a := range rets {
			p.tripSites = append(p.tripSites, site{"go_http_roundtrip_ret", p.objs.calls.GoHttpRoundtripRet, a})
		}
	}

	// The connection behind the call: optional (without it, calls are
	// still audited but not bound to their socket).
	var fields [4]int64
	for i, f := range [][2]string{{"net/http.persistConn", "conn"}, {"net.conn", "fd"}, {"net.netFD", "pfd"}, {"internal/poll.FD", "Sysfd"}} {
		if fields[i], err = p.bin.FieldOffset(f[0], f[1]); err != nil {
			p.log.Info("no request-to-connection binding", "err", err)
			return
		}
	}
	itabs, err := p.bin.Itabs()
	if err != nil {
		p.log.Info("no request-to-connection binding", "err", err)
		return
	}
	for _, it := range itabs {
		if it.Type.Name == "*net.TCPConn" && it.Interface.Name == "net.Conn" && it.Interface.PkgPath == "net" {
			offs.TcpconnItab = it.Addr + p.bias
		}
	}
	offs.PersistconnConn = uint32(fields[0])
	offs.ConnFd = uint32(fields[1])
	offs.NetfdSysfd = uint32(fields[2] + fields[3])
}

// Bindings delivers request -> connection bindings seen by the detail
// tier, of every process of the node. Closed after the node closes.
func (p *Process) Bindings() <-chan event.Binding { return p.node.bindings }

var bindingSize = int(unsafe.Sizeof(gocallsTtGoBinding{}))

// Calls delivers every outbound call the call probes saw (detail tier or
// SetAudit), with what its context allowed. Calls nobody reads are
// dropped and counted.
func (p *Process) Calls() <-chan event.Call { return p.node.calls }

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

// SetAudit attaches (on) or detaches the call probes on their own, for
// deadline audits, whatever the detail tier does.
func (p *Process) SetAudit(on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == (p.audit != nil) {
		return nil
	}
	if !on {
		err := collector.CloseLinks(p.audit)
		p.audit = nil
		return err
	}
	calls := p.callSites()
	if len(calls) == 0 {
		return fmt.Errorf("audit: no net/http or gRPC client call site in this binary")
	}
	if !p.ctxWalk {
		return fmt.Errorf("audit: the context types of this binary are not known, so calls without a deadline cannot be told apart")
	}
	for _, s := range calls {
		l, err := p.uprobe(s)
		if err != nil {
			for _, l := range p.audit {
				l.Close()
			}
			p.audit = nil
			return err
		}
		p.audit = append(p.audit, l)
	}
	return nil
}
