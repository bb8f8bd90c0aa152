package goprobe

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/timeout-tracer/tracer/gobin"
)

// resolveHTTP finds where a net/http server parses request headers. Absent
// (no net/http server in the binary, or the function was inlined away)
// means no traceparent from headers, which is logged, not fatal.
//
// The request's start is net/http's (*conn).readRequest, which also gives
// the connection's context a goroutine's inherited traceparent is checked
// against (godeadline.bpf.c, inherited_current); else the package's
// readRequest, and inherited traceparents are not used.
func (p *Process) resolveHTTP() []site {
	type probe struct {
		name string
		prog *ebpf.Program
		fn   string
	}
	var sites []site
	request := probe{"go_http_conn_request", p.objs.traceparent.GoHttpConnRequest, "net/http.(*conn).readRequest"}
	if _, err := p.bin.Func(request.fn); err != nil {
		p.log.Debug("no connection context for inherited traceparents", "missing", request.fn, "err", err)
		request = probe{"go_http_request", p.objs.traceparent.GoHttpRequest, "net/http.readRequest"}
	}
	for _, s := range []probe{
		request,
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

// resolveHTTP2Servers finds where the HTTP/2 servers (the standard
// library's, x/net's) turn a stream's HEADERS into a request, and where
// they close a stream: the inbound traceparent is kept by the stream's
// context (gotraceparent.bpf.c). Optional: one whose layout is not known is
// logged and left out.
func (p *Process) resolveHTTP2Servers(offs *godeadlineTtGoOffsets) []site {
	srvs, err := p.bin.HTTP2Servers()
	if err != nil {
		p.log.Info("no inbound traceparent from some HTTP/2 servers", "err", err)
	}
	var sites []site
	for _, s := range srvs {
		i, hdr, cls := 0, p.objs.traceparent.GoH2ServerHeaders, p.objs.traceparent.GoH2ServerClose
		if !s.Std {
			i, hdr, cls = 1, p.objs.traceparent.GoXh2ServerHeaders, p.objs.traceparent.GoXh2ServerClose
		}
		if offs.H2StreamCtx[i] != 0 {
			p.log.Warn("two HTTP/2 servers of one kind, the second is not read", "server", s.Impl)
			continue
		}
		a1, err1 := p.bin.AfterPrologue(s.NewWriterAndRequest)
		a2, err2 := p.bin.AfterPrologue(s.CloseStream)
		if err := errors.Join(err1, err2); err != nil {
			p.log.Info("no inbound traceparent from an HTTP/2 server", "server", s.Impl, "err", err)
			continue
		}
		names := [2][2]string{{"go_h2_server_headers", "go_h2_server_close"}, {"go_xh2_server_headers", "go_xh2_server_close"}}[i]
		sites = append(sites, site{names[0], hdr, a1}, site{names[1], cls, a2})
		offs.H2StreamCtx[i], offs.H2MetaFields[i] = uint32(s.StreamCtx), uint32(s.MetaFields)
		offs.H2HfName[i], offs.H2HfValue[i], offs.H2HfSize[i] = uint32(s.FieldName), uint32(s.FieldValue), uint32(s.FieldSize)
	}
	return sites
}

// Where the budget frames take their *http.Request, in bytes into their
// register arguments' spill slots: (*Client).send(req, deadline) after its
// receiver; (*timeoutHandler).ServeHTTP(w, r) after its receiver and the
// ResponseWriter's two words.
const (
	budgetReqClient  = 8
	budgetReqHandler = 3 * 8
)

// resolveClientTimeout lets the expiry probe read the budget of a deadline
// net/http made from Client.Timeout: the range of (*Client).send, whose
// receiver and request it reads from a waiter's stack, and Client.Timeout's
// offset. Optional: without them no budget is read this way.
func (p *Process) resolveClientTimeout(offs *godeadlineTtGoOffsets) {
	fn, err1 := p.bin.Func("net/http.(*Client).send")
	to, err2 := p.bin.FieldOffset("net/http.Client", "Timeout")
	if err := errors.Join(err1, err2); err != nil {
		p.log.Info("no budget from net/http's Client.Timeout", "err", err)
		return
	}
	b := godeadlineTtGoBudgetSrcTT_BUDGET_CLIENT_TIMEOUT - 1
	offs.BudgetLo[b], offs.BudgetHi[b] = fn.Entry+p.bias, fn.End+p.bias
	offs.BudgetRecv[b], offs.BudgetReq[b] = uint32(to), budgetReqClient
}

// resolveClientTimer adds the probe on net/http's doCancel to the cold
// tier (gobin.Binary.ClientTimeoutCancel): Client.Timeout's own timer over
// a RoundTripper that is not net/http's Transport, which often fires and
// wakes the request before the context's timer does. It runs only when
// that timer fires (or the program closes Request.Cancel), never on a
// request that ends in time. Optional: needs the request's context
// (resolveRoundTrip) and its Cancel field; without, only the context's own
// timer is seen.
func (p *Process) resolveClientTimer(offs *godeadlineTtGoOffsets) {
	if offs.RequestCtx == 0 {
		return
	}
	fn, err := p.bin.ClientTimeoutCancel()
	var addr uint64
	if err == nil {
		addr, err = p.bin.AfterPrologue(fn)
	}
	var rc int64
	if err == nil {
		rc, err = p.bin.FieldOffset("net/http.Request", "Cancel")
	}
	if err != nil {
		p.log.Info("net/http's Client.Timeout timer not probed", "err", err)
		return
	}
	offs.RequestCancel = uint32(rc)
	p.cold = append(p.cold, site{"go_client_timer", p.objs.GoClientTimer, addr})
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
	p.resolveClientTimeout(offs)
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
	// The waiting frames of HTTP/1 (the expiry probe's binding, no probe of
	// its own): a request waits for its response in roundTrip, for its
	// body's end in the connection's readLoop; both have the persistConn
	// first.
	p.addWaitFrame(fn, fields[0])
	if rl, err := p.bin.Func("net/http.(*persistConn).readLoop"); err == nil {
		p.addWaitFrame(rl, fields[0])
	}
	// A server's handler reading its request (its body): connReader.Read,
	// whose receiver holds the *conn and that its net.Conn (rwc). Read from
	// the goroutine that set the deadline, not from a waiter of the
	// context: net/http's body read never waits on the request's context.
	if rd, err := p.bin.Func("net/http.(*connReader).Read"); err == nil {
		cr, err1 := p.bin.FieldOffset("net/http.connReader", "conn")
		rwc, err2 := p.bin.FieldOffset("net/http.conn", "rwc")
		if err1 == nil && err2 == nil {
			p.addWaitFrameVia(rd, cr, rwc)
		} else {
			p.log.Info("a net/http handler reading its request body is not bound", "err", errors.Join(err1, err2))
		}
	}
	th := p.resolveTimeoutHandler(offs)
	p.resolveH2BodyReads(th)
	p.resolveConnLayout()
}

// resolveH2BodyReads makes the HTTP/2 servers' request body reads waiting
// frames: a handler reading its request's body over HTTP/2 (HTTPS's
// default) waits on the body's pipe, which the connection's serve loop
// fills, not on a socket of its own, so only this frame says which
// connection it waits on: the body's server connection, and that its
// net.Conn (the inbound one). Read, like connReader.Read, from the
// goroutine that set the deadline (the detail tier). Optional.
//
// th, when non-zero, is net/http's (*timeoutHandler).ServeHTTP, already a
// waiting frame for HTTP/1 (its ResponseWriter an *http.response): over
// HTTP/2 its ResponseWriter is the HTTP/2 server's, whose state's stream
// has the request's body pipe, and the goroutine waiting on that pipe (the
// handler reading the body) is read as one more waiter (TT_INBOUND_PIPE).
func (p *Process) resolveH2BodyReads(th gobin.Func) {
	reads, err := p.bin.HTTP2BodyReads()
	if err != nil {
		p.log.Info("some HTTP/2 handlers reading their request body are not bound", "err", err)
	}
	var itabs []gobin.Itab
	if th.Entry != 0 {
		if itabs, err = p.bin.Itabs(); err != nil {
			p.log.Info("a slow client behind http.TimeoutHandler over HTTP/2 is not bound", "err", err)
			th = gobin.Func{}
		}
	}
	cl := &p.ext.conns
	for _, r := range reads {
		p.addWaitFrameVia(r.Read, r.Conn, r.NetConn)
		if th.Entry == 0 {
			continue
		}
		if r.WriterErr != nil {
			p.log.Info("a slow client behind http.TimeoutHandler over HTTP/2 is not bound", "err", r.WriterErr)
			continue
		}
		var itab uint64
		for _, it := range itabs {
			if it.Type.String() == r.Writer && it.Interface.String() == "net/http.ResponseWriter" {
				itab = it.Addr + p.bias
			}
		}
		if itab == 0 {
			continue // never used as a ResponseWriter: no handler of it
		}
		if cl.PipeHead != 0 && cl.PipeHead != uint32(r.PipeHead) {
			p.log.Info("a slow client behind http.TimeoutHandler over HTTP/2 is not bound: two body pipe layouts", "server", r.Impl)
			continue
		}
		// As resolveTimeoutHandler's: ServeHTTP's second argument, w.
		i := p.addWaitFrameItab(th, 2*8, itab, r.Rws, r.Stream, r.Body)
		if i < 0 {
			return
		}
		cl.WaitInbound[i] = uint32(godeadlineTtGoInboundKindTT_INBOUND_PIPE)
		cl.PipeHead = uint32(r.PipeHead)
	}
}

// resolveTimeoutHandler makes net/http's (*timeoutHandler).ServeHTTP a
// waiting frame of the inbound kind: the connection's serving goroutine
// waits there on the deadline http.TimeoutHandler set while another
// goroutine runs the handler, and its ResponseWriter (its second argument,
// an interface: an *http.response on HTTP/1) holds the *conn and that its
// net.Conn (rwc). The expiry probe binds the goroutine parked reading
// that connection, when it reads in a waiting frame of its own (the
// handler reading its request body): a slow client. Optional.
func (p *Process) resolveTimeoutHandler(offs *godeadlineTtGoOffsets) gobin.Func {
	fn, err := p.bin.Func("net/http.(*timeoutHandler).ServeHTTP")
	if err != nil {
		return gobin.Func{} // no http.TimeoutHandler in this program
	}
	fail := func(err error) {
		p.log.Info("a slow client behind http.TimeoutHandler is not bound", "err", err)
	}
	conn, err1 := p.bin.FieldOffset("net/http.response", "conn")
	rwc, err2 := p.bin.FieldOffset("net/http.conn", "rwc")
	if err := errors.Join(err1, err2, p.resolvePollDesc()); err != nil {
		fail(err)
		return fn
	}
	itabs, err := p.bin.Itabs()
	if err != nil {
		fail(err)
		return fn
	}
	var itab uint64
	for _, it := range itabs {
		if it.Type.String() == "*net/http.response" && it.Interface.String() == "net/http.ResponseWriter" {
			itab = it.Addr + p.bias
		}
	}
	if itab == 0 {
		fail(errors.New("no itab of *http.response as an http.ResponseWriter"))
		return fn
	}
	if offs.TcpconnItab == 0 { // (net.conn.fd is at offset 0)
		fail(errors.New("no layout of *net.TCPConn as a net.Conn"))
		return fn
	}
	// ServeHTTP(w ResponseWriter, r *Request): the receiver's word, then
	// w's itab and data words.
	i := p.addWaitFrameItab(fn, 2*8, itab, conn, -1, rwc)
	if i < 0 {
		return fn
	}
	p.ext.conns.WaitInbound[i] = uint32(godeadlineTtGoInboundKindTT_INBOUND_POLL)
	// Its budget: the deadline it sets is WithTimeout(r.Context(), h.dt).
	dt, err := p.bin.FieldOffset("net/http.timeoutHandler", "dt")
	if err != nil || offs.RequestCtx == 0 {
		p.log.Info("no budget from http.TimeoutHandler", "err", err)
		return fn
	}
	b := godeadlineTtGoBudgetSrcTT_BUDGET_TIMEOUT_HANDLER - 1
	offs.BudgetLo[b], offs.BudgetHi[b] = fn.Entry+p.bias, fn.End+p.bias
	offs.BudgetRecv[b], offs.BudgetReq[b] = uint32(dt), budgetReqHandler
	return fn
}

// resolvePollDesc sets the connection layout's way from a *net.netFD to
// its runtime pollDesc and the goroutines parked on it, reading (rg) or
// writing (wg): for the connections AfterFunc registrations hold and for
// the inbound connection behind http.TimeoutHandler.
func (p *Process) resolvePollDesc() error {
	var fo [6]int64
	for j, f := range [][2]string{{"net.netFD", "pfd"}, {"internal/poll.FD", "pd"}, {"internal/poll.pollDesc", "runtimeCtx"},
		{"runtime.pollDesc", "fd"}, {"runtime.pollDesc", "rg"}, {"runtime.pollDesc", "wg"}} {
		var err error
		if fo[j], err = p.bin.FieldOffset(f[0], f[1]); err != nil {
			return err
		}
	}
	cl := &p.ext.conns
	cl.NetfdPd = uint32(fo[0] + fo[1] + fo[2])
	cl.PolldescFd, cl.PolldescRg, cl.PolldescWg = uint32(fo[3]), uint32(fo[4]), uint32(fo[5])
	return nil
}

// resolveDialWait makes net's (*netFD).connect a waiting frame, the last
// one (the first to go when a binary has more than the probe reads): a
// dial waits for its handshake there, in the poller, on no context (the
// dial's deadline is an AfterFunc and a socket deadline), so only the
// goroutine that set the deadline (read at the expiry with the detail
// tier) is found in it. Its receiver is the *netFD itself.
func (p *Process) resolveDialWait(offs *godeadlineTtGoOffsets) {
	fn, err := p.bin.Func("net.(*netFD).connect")
	if err != nil {
		p.log.Debug("a dial's wait is not bound at the expiry", "err", err)
		return
	}
	if offs.NetfdSysfd == 0 {
		pfd, err1 := p.bin.FieldOffset("net.netFD", "pfd")
		sysfd, err2 := p.bin.FieldOffset("internal/poll.FD", "Sysfd")
		if err1 != nil || err2 != nil {
			p.log.Debug("a dial's wait is not bound at the expiry", "err", errors.Join(err1, err2))
			return
		}
		offs.NetfdSysfd = uint32(pfd + sysfd)
	}
	i := p.addWaitFrameVia2(fn, -1, -1, 0)
	if i < 0 {
		return
	}
	p.ext.conns.WaitNetfd[i] = 1
	p.resolveAfterFuncs(offs, fn, i)
	p.resolveDialTimer(offs, i)
	p.resolveDialerTimeout(offs)
	if p.ext.conns.AfterfuncItab != 0 {
		p.resolveGetConn()
	}
}

// resolveDialerTimeout lets the expiry probe read the budget of a deadline
// net's DialContext made from Dialer.Timeout: DialContext's range (a budget
// frame, read past the frames a waiter keeps), where its open-coded defers
// lie from its frame pointer (the deferred cancel that captures the
// deadline proves it DialContext's own), and the Dialer's Timeout and
// Deadline. Optional: without them no budget is read this way.
func (p *Process) resolveDialerTimeout(offs *godeadlineTtGoOffsets) {
	fn, err := p.bin.Func("net.(*Dialer).DialContext")
	if err != nil {
		p.log.Debug("no budget from net.Dialer's Timeout", "err", err)
		return
	}
	od, err1 := p.bin.OpenDefers(fn)
	to, err2 := p.bin.FieldOffset("net.Dialer", "Timeout")
	dl, err3 := p.bin.FieldOffset("net.Dialer", "Deadline")
	var size uint64
	var err4 error
	if p.bin.Arch == "arm64" {
		// varp is the frame pointer plus the frame's size there (the
		// saved frame pointer lies just below the stack pointer).
		size, err4 = p.bin.FrameSize(fn)
	}
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		p.log.Info("no budget from net.Dialer's Timeout", "err", err)
		return
	}
	b := godeadlineTtGoBudgetSrcTT_BUDGET_DIALER_TIMEOUT - 1
	offs.BudgetLo[b], offs.BudgetHi[b] = fn.Entry+p.bias, fn.End+p.bias
	offs.BudgetRecv[b] = uint32(to)
	offs.DialerDeadline = uint32(dl)
	offs.DialDeferBits = int32(int64(size) - int64(od.Bits))
	offs.DialDeferSlots = int32(int64(size) - int64(od.Slots))
}

// resolveDialTimer adds the probe on runtime.netpollWriteDeadline to the
// cold tier: the timer of a socket's write deadline, which net's connect
// sets to its context's deadline. Both timers fire at the deadline; when
// the socket's runs first the dial returns "i/o timeout" and the program
// may exit (a one-shot CLI) or cancel the context before the context's own
// timer fires, which then reports nothing. The probe finds the dial's
// context in connect's frame (frame: its waiting frame's index) and
// reports its expiry, merged with the context's timer. No call that ends
// in time runs it: a dial that connects resets its deadline, and a
// program's own write deadlines fire only when a write is late.
// Optional: needs the poller's layout (resolvePollDesc).
func (p *Process) resolveDialTimer(offs *godeadlineTtGoOffsets, frame int) {
	cl := &p.ext.conns
	if cl.PolldescWg == 0 {
		if err := p.resolvePollDesc(); err != nil {
			p.log.Info("a dial's socket deadline is not probed", "err", err)
			return
		}
	}
	fn, err := p.bin.Func("runtime.netpollWriteDeadline")
	var addr uint64
	if err == nil {
		addr, err = p.bin.AfterPrologue(fn)
	}
	if err != nil {
		p.log.Info("a dial's socket deadline is not probed", "err", err)
		return
	}
	cl.DialFrame, offs.HasDialTimer = uint32(frame)+1, 1
	p.cold = append(p.cold, site{"go_dial_timer", p.objs.GoDialTimer, addr})
}

// resolveGetConn lets the expiry probe follow a request waiting in net/http's
// connection pool (getConn) to the dial made for it on another goroutine
// (getconn_dial_ctx): getConn's range, wantConn.ctx, and the itabs of the
// dial context's two levels, *context.cancelCtx and context.withoutCancelCtx
// as a context.Context, with withoutCancelCtx's c. Go 1.23+ dials under
// WithCancel(WithoutCancel(request's context)); before, under the
// request's own context, whose children are read anyway. Optional.
func (p *Process) resolveGetConn() {
	cl := &p.ext.conns
	fn, err := p.bin.Func("net/http.(*Transport).getConn")
	if err != nil {
		return // no net/http client
	}
	wc, err := p.bin.FieldOffset("net/http.wantConn", "ctx")
	if err != nil {
		p.log.Debug("a request waiting for its dial in the pool is not followed to it", "err", err)
		return
	}
	cis, err := p.bin.ContextItabs()
	if err != nil {
		p.log.Debug("a request waiting for its dial in the pool is not followed to it", "err", err)
		return
	}
	var cancelItab, withoutItab uint64
	var withoutC int64
	for _, ci := range cis {
		switch ci.Type.Name {
		case "*context.cancelCtx":
			cancelItab = ci.Addr
		case "context.withoutCancelCtx":
			withoutItab, withoutC = ci.Addr, ci.ParentOffset
		}
	}
	if cancelItab == 0 || withoutItab == 0 {
		p.log.Debug("a request waiting for its dial in the pool is not followed to it", "err", "no itab of *context.cancelCtx or context.withoutCancelCtx as a context.Context")
		return
	}
	cl.GetconnLo, cl.GetconnHi = fn.Entry+p.bias, fn.End+p.bias
	cl.CancelctxItab, cl.WithoutcancelItab = cancelItab+p.bias, withoutItab+p.bias
	cl.WantconnCtx, cl.WithoutcancelC = uint32(wc), uint32(withoutC)
}

// resolveAfterFuncs lets the expiry probe find the connections that
// AfterFunc registrations on the expiring context hold (read_afterfunc),
// with no detail tier: net's (*netFD).connect since Go 1.26 registers one
// on the dial's context that holds the *netFD (Go 1.21-1.25's connect
// waits on the context in a goroutine of its own instead, a waiter like
// any other); pgx's context watcher (v5.6+) registers one per query that
// holds its handler, whose default holds the connection. Optional: each
// whose layout is not known is logged and left out.
func (p *Process) resolveAfterFuncs(offs *godeadlineTtGoOffsets, connect gobin.Func, frame int) {
	cl := &p.ext.conns
	fail := func(what string, err error) {
		p.log.Debug("a connection held by an AfterFunc is not read at the expiry", "what", what, "err", err)
	}
	af, err := p.bin.FieldOffset("context.afterFuncCtx", "f")
	if err == nil {
		err = p.resolvePollDesc()
	}
	if err != nil {
		fail("any", err)
		return
	}
	itabs, err := p.bin.Itabs()
	if err != nil {
		fail("any", err)
		return
	}
	for _, it := range itabs {
		if it.Type == (gobin.TypeName{Name: "*context.afterFuncCtx", PkgPath: "context"}) && it.Interface.Name == "context.canceler" {
			cl.AfterfuncItab = it.Addr + p.bias
		}
		if offs.TcpconnItab == 0 && it.Type.Name == "*net.TCPConn" && it.Interface.Name == "net.Conn" && it.Interface.PkgPath == "net" {
			offs.TcpconnItab = it.Addr + p.bias
		}
	}
	if cl.AfterfuncItab == 0 {
		fail("any", errors.New("no itab of *context.afterFuncCtx as a context.canceler (no AfterFunc in the program)"))
		return
	}
	if offs.ConnFd == 0 {
		if cf, err := p.bin.FieldOffset("net.conn", "fd"); err == nil {
			offs.ConnFd = uint32(cf)
		}
	}
	cl.AfterfuncF = uint32(af)
	n := 0
	add := func(fn gobin.Func, name, at string, via []int64, conn int64, framePC uint64) {
		if n == len(cl.AfFn) {
			p.log.Warn("more AfterFunc closures than the expiry probe reads", "left out", fn.Name)
			return
		}
		cl.AfFn[n], cl.AfFramePc[n] = fn.Entry+p.bias, framePC
		for h, v := range via {
			cl.AfVia[n][h] = uint32(v) + 1
		}
		if conn >= 0 {
			cl.AfConn[n] = uint32(conn) + 1
		}
		p.ext.afNames = append(p.ext.afNames, name)
		p.ext.afAt = append(p.ext.afAt, at)
		n++
	}
	// connect's closures: the AfterFunc's is one of them (the deferred
	// one is never registered); its first capture is the *netFD.
	if closures, err := p.bin.Funcs(connect.Name + ".func"); err == nil && len(closures) <= 2 {
		// Where such a dial waited, without a line when its stack was
		// not read (readied by its socket deadline).
		at := connect.Name
		if fr := p.bin.Frames(connect.Entry); len(fr) > 0 && fr[0].File != "" && fr[0].File != "?" {
			at = fmt.Sprintf("%s (%s)", connect.Name, fr[0].File)
		}
		for _, c := range closures {
			add(c, connect.Name, at, nil, -1, cl.WaitLo[frame]+1)
		}
	} else {
		fail(connect.Name, fmt.Errorf("%d closures: %v", len(closures), err))
	}
	// pgx v5's context watcher: its closure's first capture is the
	// watcher, whose handler (an interface) is, by default, a
	// *pgconn.DeadlineContextWatcherHandler holding the net.Conn.
	const watch = "github.com/jackc/pgx/v5/pgconn/ctxwatch.(*ContextWatcher).Watch"
	if fn, err := p.bin.Func(watch + ".func1"); err == nil {
		h, err1 := p.bin.FieldOffset("github.com/jackc/pgx/v5/pgconn/ctxwatch.ContextWatcher", "handler")
		c, err2 := p.bin.FieldOffset("github.com/jackc/pgx/v5/pgconn.DeadlineContextWatcherHandler", "Conn")
		if err := errors.Join(err1, err2); err != nil {
			fail(watch, err)
		} else {
			add(fn, watch, "", []int64{h + 8}, c, 0)
		}
	}
}

// addWaitFrame makes fn a waiting frame of the expiry probe: a goroutine
// parked on an expiring context with fn in its stack waits on the
// connection whose net.Conn is conn bytes into fn's first argument.
func (p *Process) addWaitFrame(fn gobin.Func, conn int64) { p.addWaitFrameVia(fn, -1, conn) }

// addWaitFrameVia is addWaitFrame for a first argument that holds, via
// bytes in, a pointer to what holds the net.Conn; via < 0: none.
func (p *Process) addWaitFrameVia(fn gobin.Func, via, conn int64) {
	p.addWaitFrameVia2(fn, via, -1, conn)
}

// addWaitFrameVia2 is addWaitFrameVia with a second pointer to follow,
// via2 bytes into what the first one points to (-1: none). It returns
// the frame's index, -1 when the probe reads no more frames.
func (p *Process) addWaitFrameVia2(fn gobin.Func, via, via2, conn int64) int {
	return p.addWaitFrameAt(itabFrames, len(p.ext.conns.WaitLo), fn, via, via2, conn)
}

// itabFrames is how many waiting frames, the first ones, have an
// interface argument of a known type (bpf: TT_ITAB_FRAMES).
const itabFrames = 3

// addWaitFrameItab is addWaitFrameVia2 for a frame whose argument, arg
// bytes into its spill slots, is an interface whose itab must be itab
// (runtime address), its own or that of what a wrapper of it holds first.
func (p *Process) addWaitFrameItab(fn gobin.Func, arg uint32, itab uint64, via, via2, conn int64) int {
	i := p.addWaitFrameAt(0, itabFrames, fn, via, via2, conn)
	if i >= 0 {
		p.ext.conns.WaitArg[i], p.ext.conns.WaitItab[i] = arg, itab
	}
	return i
}

// addWaitFrameAt adds a waiting frame in the first free slot of [lo, hi).
func (p *Process) addWaitFrameAt(lo, hi int, fn gobin.Func, via, via2, conn int64) int {
	cl := &p.ext.conns
	for i := lo; i < hi; i++ {
		if cl.WaitLo[i] == 0 {
			cl.WaitLo[i], cl.WaitHi[i], cl.WaitConn[i] = fn.Entry+p.bias, fn.End+p.bias, uint32(conn)
			if via >= 0 {
				cl.WaitVia[i] = uint32(via) + 1
			}
			if via2 >= 0 {
				cl.WaitVia2[i] = uint32(via2) + 1
			}
			p.ext.hasConns = true
			p.ext.waitFrames[i] = fn.Name
			return i
		}
	}
	p.log.Warn("more waiting frames than the expiry probe reads", "left out", fn.Name)
	return -1
}

// resolveConnLayout finds the HTTP/2 clients' round trips, whose requests
// are bound like HTTP/1's. Each is optional: one whose layout is not known
// is logged and left out, never guessed (an HTTP/2 request is then not
// probed).
func (p *Process) resolveConnLayout() {
	cl := &p.ext.conns
	h2, err := p.bin.HTTP2Clients()
	if err != nil {
		p.log.Info("some HTTP/2 requests are not bound", "err", err)
	}
	var probed [2]bool // the standard library's, x/net's
	for _, c := range h2 {
		addr, err := p.bin.AfterPrologue(c.RoundTrip)
		if err != nil {
			p.log.Info("HTTP/2 requests are not bound", "client", c.Impl, "err", err)
			continue
		}
		i, s := 0, site{"go_h2_roundtrip", p.objs.calls.GoH2Roundtrip, addr}
		if !c.Std {
			i, s = 1, site{"go_xh2_roundtrip", p.objs.calls.GoXh2Roundtrip, addr}
		}
		if probed[i] {
			p.log.Warn("two HTTP/2 clients of one kind, the second is not bound", "client", c.Impl)
			continue
		}
		probed[i] = true
		cl.H2Tconn[i], cl.H2ReqCtx[i] = uint32(c.TConn), uint32(c.ReqCtx)
		p.addWaitFrame(c.RoundTrip, c.TConn)
		p.tripSites = append(p.tripSites, s)
		if rets, err := p.bin.Returns(c.RoundTrip); err == nil {
			for _, a := range rets {
				p.tripSites = append(p.tripSites, site{"go_http_roundtrip_ret", p.objs.calls.GoHttpRoundtripRet, a})
			}
		}
	}
	p.ext.hasConns = p.ext.hasConns || len(h2) > 0
}

// resolveWrappers finds the connection wrappers the probes look through
// (crypto/tls, grpc-go's TLS credentials), for net/http and gRPC alike: a
// gRPC program need not link net/http's client.
func (p *Process) resolveWrappers() {
	cl := &p.ext.conns
	ws, err := p.bin.ConnWrappers()
	if err != nil {
		p.log.Info("some wrapped connections are not bound", "err", err)
	}
	for i, w := range ws {
		if i == len(cl.WrapItab) {
			p.log.Warn("more connection wrappers than the probes look through", "left out", w.Type)
			break
		}
		cl.WrapItab[i], cl.WrapInner[i] = w.Itab+p.bias, uint32(w.Inner)
	}
	p.ext.hasConns = p.ext.hasConns || len(ws) > 0
}

// readsInboundTraceparent reports whether the process has a server whose
// inbound traceparent the detail tier reads (net/http or gRPC).
func (p *Process) readsInboundTraceparent() bool {
	return len(p.httpSites) > 0 || p.ext.grpc.HasServer != 0
}
