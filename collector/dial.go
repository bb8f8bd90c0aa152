package collector

// resolveDial finds net.(*netFD).connect: its entry (the context of the
// dial), its calls to internal/poll.(*FD).Init right after connect(2),
// and its returns. Missing pieces mean no dial bindings (logged).
func (p *GoProbes) resolveDial() {
	fn, err := p.bin.Func("net.(*netFD).connect")
	if err != nil {
		p.log.Debug("no dial binding", "err", err)
		return
	}
	initFn, err := p.bin.Func("internal/poll.(*FD).Init")
	if err != nil {
		p.log.Info("no dial binding", "err", err)
		return
	}
	entry, err := p.bin.AfterPrologue(fn)
	if err != nil {
		p.log.Info("no dial binding", "err", err)
		return
	}
	inits, err := p.bin.CallSites(fn, initFn)
	if err != nil || len(inits) == 0 {
		p.log.Info("no dial binding: no call to poll.FD.Init in net.(*netFD).connect", "err", err)
		return
	}
	rets, err := p.bin.Returns(fn)
	if err != nil || len(rets) == 0 {
		p.log.Info("no dial binding: no returns found in net.(*netFD).connect", "err", err)
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
	p.ext.dial = godeadlineTtGoDialOffsets{NetfdPfd: uint32(pfd), PfdSysfd: uint32(sysfd)}
	p.ext.hasDial = true
	// Returns first, entry last: a dial is only recorded once its end is watched.
	for _, a := range rets {
		p.ext.sites = append(p.ext.sites, site{"go_dial_ret", a})
	}
	for _, a := range inits {
		p.ext.sites = append(p.ext.sites, site{"go_dial_connected", a})
	}
	p.ext.sites = append(p.ext.sites, site{"go_dial_entry", entry})
}

// resolveNewproc finds runtime.newproc1 (every `go` statement runs it, on
// the system stack): goroutines started by one that serves a request
// inherit its traceparent. It costs two traps per goroutine started, so
// it belongs to the detail tier only, and only in programs that serve
// requests (a net/http or gRPC server whose inbound traceparent a
// goroutine can hold): elsewhere nothing is there to inherit.
func (p *GoProbes) resolveNewproc() {
	if len(p.httpSites) == 0 && p.ext.grpc.HasServer == 0 {
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
		p.ext.sites = append(p.ext.sites, site{"go_newproc_ret", a})
	}
	p.ext.sites = append(p.ext.sites, site{"go_newproc_entry", entry})
}
