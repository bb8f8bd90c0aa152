package goprobe

// resolveDial finds net.(*netFD).connect (its entry: the context of the
// dial) and the returns of syscall.Connect, which it calls once per
// connect: there connect(2) is done and the socket has its cookie. Missing
// pieces mean no dial bindings (logged). Few sites on purpose: each uprobe
// costs ~0.1 s to detach (RCU grace periods), and netFD.connect alone has
// a dozen RETs.
func (p *Process) resolveDial() {
	fn, err := p.bin.Func("net.(*netFD).connect")
	if err != nil {
		p.log.Debug("no dial binding", "err", err)
		return
	}
	entry, err := p.bin.AfterPrologue(fn)
	if err != nil {
		p.log.Info("no dial binding", "err", err)
		return
	}
	sysConnect, err := p.bin.Func("syscall.Connect")
	if err != nil {
		p.log.Info("no dial binding", "err", err)
		return
	}
	rets, err := p.bin.Returns(sysConnect)
	if err != nil || len(rets) == 0 {
		p.log.Info("no dial binding: no returns found in syscall.Connect", "err", err)
		return
	}
	pfd, err := p.bin.FieldOffset("net.netFD", "pfd")
	if err != nil {
		p.log.Info("no dial binding", "err", err)
		return
	}
	sysfd, err := p.bin.FieldOffset("internal/poll.FD", "Sysfd")
	if err != nil {
		p.log.Info("no dial binding", "err", err)
		return
	}
	p.ext.dial = gocallsTtGoDialOffsets{NetfdPfd: uint32(pfd), PfdSysfd: uint32(sysfd)}
	p.ext.hasDial = true
	// Returns first, entry last: a dial is only recorded once its end is watched.
	for _, a := range rets {
		p.ext.sites = append(p.ext.sites, site{"go_dial_ret", p.objs.calls.GoDialRet, a})
	}
	p.ext.sites = append(p.ext.sites, site{"go_dial_entry", p.objs.calls.GoDialEntry, entry})
}

// resolveNewproc finds runtime.newproc1 (every `go` statement runs it, on
// the system stack): goroutines started by one that serves a request
// inherit its traceparent. It costs two traps per goroutine started, so
// it belongs to the detail tier only, and only in programs that serve
// requests (a net/http or gRPC server whose inbound traceparent a
// goroutine can hold): elsewhere nothing is there to inherit.
func (p *Process) resolveNewproc() {
	if !p.readsInboundTraceparent() {
		p.log.Debug("no goroutine ancestry: no inbound traceparent probe (net/http or gRPC server) in this program")
		return
	}
	fn, err := p.bin.Func("runtime.newproc1")
	if err != nil {
		p.log.Info("no goroutine ancestry", "err", err)
		return
	}
	entry, err := p.bin.AfterPrologue(fn)
	if err != nil {
		p.log.Info("no goroutine ancestry", "err", err)
		return
	}
	rets, err := p.bin.Returns(fn)
	if err != nil || len(rets) == 0 {
		p.log.Info("no goroutine ancestry: no returns found in runtime.newproc1", "err", err)
		return
	}
	for _, a := range rets {
		p.ext.sites = append(p.ext.sites, site{"go_newproc_ret", p.objs.traceparent.GoNewprocRet, a})
	}
	p.ext.sites = append(p.ext.sites, site{"go_newproc_entry", p.objs.traceparent.GoNewprocEntry, entry})
}
