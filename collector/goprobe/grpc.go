package goprobe

import (
	"fmt"

	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/gobin"
)

// extProbes are the detail probes beyond net/http and OpenTelemetry: gRPC
// (stream -> connection, inbound metadata), dials under a deadline, and
// goroutine ancestry. Each is optional: a binary without the piece, or
// whose layout cannot be known, gets no such probe (logged), never a guess.
type extProbes struct {
	sites []site
	grpc  godeadlineTtGoGrpcOffsets
	dial  gocallsTtGoDialOffsets
	conns gocallsTtGoConnLayout
	// hasGRPC, hasDial and hasConns say the maps must be filled for the
	// process.
	hasGRPC, hasDial, hasConns bool
	waitFrames                 [len(gocallsTtGoConnLayout{}.WaitLo)]string // the functions in conns.Wait*, by slot
	// afNames are the functions whose AfterFunc closures conns.AfFn
	// lists, by index; afAt where such a call waited when no goroutine
	// was parked on its connection (no stack: connect and its file for a
	// dial, readied by its socket deadline; empty otherwise).
	afNames, afAt  []string
	lateCookieErrs uint64 // bound connections whose cookie could not be resolved late (under Process.mu)
	// Waiting frames read at expiries whose receiver's spill slot was not
	// live there (not used), and whose socket had no cookie yet (under
	// Process.mu).
	waitStale, waitNoCookie uint64
}

// resolveExt finds the sites and layouts of the optional probes.
func (p *Process) resolveExt() {
	p.resolveGRPC()
	p.resolveDial()
	p.resolveNewproc()
}

// registerExt gives the BPF programs the process's layouts.
func (p *Process) registerExt() error {
	pid := uint32(p.pid)
	if p.ext.hasGRPC {
		if err := p.objs.GoGrpc.Put(pid, p.ext.grpc); err != nil {
			return fmt.Errorf("register gRPC layout of process %d: %w", pid, err)
		}
	}
	if p.ext.hasConns {
		if err := p.objs.GoConns.Put(pid, p.ext.conns); err != nil {
			return fmt.Errorf("register connection layout of process %d: %w", pid, err)
		}
	}
	if p.ext.hasDial {
		if err := p.objs.calls.GoDial.Put(pid, p.ext.dial); err != nil {
			return fmt.Errorf("register dial layout of process %d: %w", pid, err)
		}
	}
	return nil
}

// tcpConnChain resolves *net.TCPConn's itab as a net.Conn (runtime
// address) and the offsets from a *net.TCPConn to its file descriptor:
// conn.fd, then netFD.pfd + poll.FD.Sysfd.
func (p *Process) tcpConnChain() (itab uint64, connFD, netfdSysfd uint32, err error) {
	var fields [3]int64
	for i, f := range [][2]string{{"net.conn", "fd"}, {"net.netFD", "pfd"}, {"internal/poll.FD", "Sysfd"}} {
		if fields[i], err = p.bin.FieldOffset(f[0], f[1]); err != nil {
			return 0, 0, 0, err
		}
	}
	itabs, err := p.bin.Itabs()
	if err != nil {
		return 0, 0, 0, err
	}
	for _, it := range itabs {
		if it.Type.Name == "*net.TCPConn" && it.Interface.Name == "net.Conn" && it.Interface.PkgPath == "net" {
			itab = it.Addr + p.bias
		}
	}
	if itab == 0 {
		return 0, 0, 0, fmt.Errorf("no itab of *net.TCPConn as a net.Conn")
	}
	return itab, uint32(fields[0]), uint32(fields[1] + fields[2]), nil
}

// resolveGRPC finds the gRPC client's NewStream (request -> connection)
// and the server's operateHeaders (inbound traceparent metadata).
func (p *Process) resolveGRPC() {
	g := &p.ext.grpc
	if cl, err := p.bin.GRPCClient(); err != nil {
		p.log.Debug("no gRPC stream binding", "err", err)
	} else if itab, connFD, sysfd, err := p.tcpConnChain(); err != nil {
		p.log.Info("no gRPC stream binding", "err", err)
	} else if addr, err := p.bin.AfterPrologue(cl.NewStream); err != nil {
		p.log.Info("no gRPC stream binding", "err", err)
	} else {
		g.HasClient, g.ClientConn, g.TcpconnItab, g.ConnFd, g.NetfdSysfd = 1, uint32(cl.Conn), itab, connFD, sysfd
		p.ext.sites = append(p.ext.sites, site{"go_grpc_new_stream", p.objs.calls.GoGrpcNewStream, addr})
		// A call waiting for its response headers: the expiry probe binds
		// it through the stream's transport (no probe of its own).
		if w, err := p.bin.GRPCClientWait(); err != nil {
			p.log.Info("gRPC calls are not bound at the expiry", "err", err)
		} else {
			p.addWaitFrameVia(w.WaitOnHeader, w.Transport, cl.Conn)
		}
	}
	// A server handler waiting for its client's next message: the expiry
	// probe binds it to the inbound connection through the server
	// stream's transport (no probe of its own).
	if w, err := p.bin.GRPCServerRecv(); err != nil {
		p.log.Debug("gRPC server receives are not bound at the expiry", "err", err)
	} else if itab, connFD, sysfd, err := p.tcpConnChain(); err != nil {
		p.log.Info("gRPC server receives are not bound at the expiry", "err", err)
	} else {
		if g.TcpconnItab == 0 {
			g.TcpconnItab, g.ConnFd, g.NetfdSysfd = itab, connFD, sysfd
		}
		p.addWaitFrameVia2(w.RecvMsg, w.Via, w.Via2, w.Conn)
	}
	if srv, err := p.bin.GRPCServer(); err != nil {
		p.log.Debug("no inbound traceparent from gRPC metadata", "err", err)
	} else if key, val, err := p.valueCtxOffsets(); err != nil {
		p.log.Info("no inbound traceparent from gRPC metadata", "err", err)
	} else if addr, err := p.bin.AfterPrologue(srv.OperateHeaders); err != nil {
		p.log.Info("no inbound traceparent from gRPC metadata", "err", err)
	} else {
		g.HasServer = 1
		g.StreamKeyType = srv.StreamKeyType + p.bias
		g.MetaHeaders, g.MetaFields, g.FrameStreamId = uint32(srv.MetaHeaders), uint32(srv.MetaFields), uint32(srv.FrameStreamID)
		g.HfName, g.HfValue, g.HfSize = uint32(srv.FieldName), uint32(srv.FieldValue), uint32(srv.FieldSize)
		g.StreamId, g.StreamSt, g.StreamEmbed = uint32(srv.StreamID), uint32(srv.StreamTransport), uint32(godeadlineTtGoNoOffsetTT_GO_NO_EMBED)
		if srv.StreamEmbed >= 0 {
			g.StreamEmbed = uint32(srv.StreamEmbed)
		}
		g.ValuectxKey, g.ValuectxVal = key, val
		p.ext.sites = append(p.ext.sites, site{"go_grpc_headers", p.objs.traceparent.GoGrpcHeaders, addr})
		p.resolveGRPCTimer(srv)
	}
	p.ext.hasGRPC = g.HasClient != 0 || g.HasServer != 0
}

// resolveGRPCTimer adds the probe on grpc-go's server deadline timer to
// the cold tier (gobin.Binary.GRPCServerTimer): a second timer beside the
// stream context's, whose closeStream cancels that context and releases
// the handler, often before the context's own timer fires (which then
// finds nobody waiting). It runs only when a call's deadline passes.
// Optional: without it only the context's own timer is seen.
func (p *Process) resolveGRPCTimer(srv *gobin.GRPCServerLayout) {
	fn, err := p.bin.GRPCServerTimer()
	var addr uint64
	if err == nil {
		addr, err = p.bin.AfterPrologue(fn)
	}
	if err != nil {
		p.log.Info("grpc-go's server deadline timer not probed", "err", err)
		return
	}
	p.ext.grpc.StreamCtx, p.ext.grpc.HasTimer = uint32(srv.StreamCtx), 1
	p.cold = append(p.cold, site{"go_grpc_timer", p.objs.GoGrpcTimer, addr})
}

// valueCtxOffsets are context.valueCtx's key and val offsets.
func (p *Process) valueCtxOffsets() (key, val uint32, err error) {
	k, err := p.bin.FieldOffset("context.valueCtx", "key")
	if err != nil {
		return 0, 0, err
	}
	v, err := p.bin.FieldOffset("context.valueCtx", "val")
	if err != nil {
		return 0, 0, err
	}
	return uint32(k), uint32(v), nil
}

// deliverExt delivers the bindings of the gRPC and dial probes; handled
// is false for other kinds, cont false when the probes are closing.
func (p *Process) deliverExt(r *gocallsTtGoBinding) (handled, cont bool) {
	var src string
	switch r.Kind {
	case uint8(gocallsTtGoBindingKindTT_BIND_GRPC_STREAM):
		src = event.BindGRPCStream
	case uint8(gocallsTtGoBindingKindTT_BIND_DIAL):
		src = event.BindDial
	default:
		return false, true
	}
	if r.Kind == uint8(gocallsTtGoBindingKindTT_BIND_GRPC_STREAM) {
		// A gRPC call: what its context allowed, for the audit
		// (deadline_missing; a stream has no end probe, so no hung_call).
		c := p.call(r)
		c.Kind = "grpc"
		select {
		case p.node.calls <- c:
		default:
			p.node.mu.Lock()
			p.node.callsDropped++ // nobody reads calls (no audit): counted, not blocking
			p.node.mu.Unlock()
		}
	}
	if r.Cookie == 0 {
		return true, true // TLS or an unresolved descriptor: no binding, not a wrong one
	}
	b := event.Binding{Mono: r.TsNs, PID: r.Pid, Goid: r.Goid, Cookie: r.Cookie, Source: src}
	select {
	case p.node.bindings <- b:
		return true, true
	case <-p.node.done:
		return true, false
	}
}
