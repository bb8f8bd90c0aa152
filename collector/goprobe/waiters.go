package goprobe

import (
	"errors"
	"strings"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// resolveWaiters finds what reading an expiring context's waiters needs:
// its Done channel, the channel's receive queue, each sudog's goroutine and
// the goroutine's saved pc and frame pointer. Optional: without them the
// reports have no waiting_at (logged), nothing else changes.
func (p *Process) resolveWaiters(offs *godeadlineTtGoOffsets) {
	fields := []struct {
		typ, path string
		dst       *uint32
	}{
		{"context.cancelCtx", "done", &offs.CancelctxDone},
		{"runtime.hchan", "recvq.first", &offs.HchanRecvqFirst},
		{"runtime.sudog", "g", &offs.SudogG},
		{"runtime.sudog", "next", &offs.SudogNext},
		{"runtime.g", "sched.pc", &offs.G_schedPc},
		{"runtime.g", "sched.bp", &offs.G_schedBp},
	}
	for _, f := range fields {
		off, err := p.bin.FieldOffset(f.typ, f.path)
		if err != nil {
			p.log.Info("no waiting_at in the reports", "err", err)
			return
		}
		*f.dst = uint32(off)
	}
	offs.HasWaiters, p.waitersRead = 1, true
	// Whether a waiter's select had been won by another case already.
	if off, err := p.bin.FieldOffset("runtime.g", "selectDone"); err == nil {
		offs.G_selectdone = uint32(off)
	} else {
		p.log.Debug("waiters woken by another case not told apart", "err", err)
	}
	// Whether the goroutine that set the deadline is parked, to read where
	// (a net/http handler reading its request body: no waiter of the
	// context).
	if off, err := p.bin.FieldOffset("runtime.g", "atomicstatus"); err == nil {
		offs.G_atomicstatus = uint32(off)
	} else {
		p.log.Debug("the deadline's creator is not read at the expiry", "err", err)
	}
	// The children map: a swiss map since Go 1.24 (the default then; a
	// binary built with GOEXPERIMENT=noswissmap has no such type in its
	// DWARF, and without DWARF the table says what the release's default
	// was).
	dp, err1 := p.bin.FieldOffset("internal/runtime/maps.Map", "dirPtr")
	dl, err2 := p.bin.FieldOffset("internal/runtime/maps.Map", "dirLen")
	if err1 == nil && err2 == nil {
		offs.HasChildren, offs.MapDirptr, offs.MapDirlen = uint32(godeadlineTtGoChildrenMapTT_CHILDREN_SWISS), uint32(dp), uint32(dl)
		return
	}
	// Before Go 1.24 (or GOEXPERIMENT=noswissmap): a runtime.hmap, read
	// when it is one bucket (B 0: at most 8 children). From DWARF only: the
	// generated table does not carry the hmap.
	bk, err3 := p.bin.FieldOffset("runtime.hmap", "buckets")
	b, err4 := p.bin.FieldOffset("runtime.hmap", "B")
	if err3 != nil || err4 != nil {
		p.log.Debug("waiting_at from the context's own Done channel only", "err", errors.Join(err1, err2, err3, err4))
		return
	}
	offs.HasChildren, offs.MapDirptr, offs.MapDirlen = uint32(godeadlineTtGoChildrenMapTT_CHILDREN_HMAP), uint32(bk), uint32(b)
}

// waiters decodes the goroutines parked on the expiring context's Done
// channel: each pc expands to its inlined frames.
func (p *Process) waiters(r *godeadlineTtGoEvent) []event.Waiter {
	n := min(int(r.Waiters), len(r.WaiterGoid))
	if n == 0 {
		return nil
	}
	ws := make([]event.Waiter, 0, n)
	for i := range n {
		w := event.Waiter{Goid: r.WaiterGoid[i], Woken: r.WaiterWoken[i] != 0, Creator: r.WaiterCreator[i] != 0}
		af := -1
		if r.WaiterAf[i] != 0 && !inbound(r, i) {
			af = int(r.WaiterAf[i] >> 2)
			if af < len(p.ext.afNames) {
				w.AfterFunc = p.ext.afNames[af]
			}
			w.Readied = r.WaiterAf[i]&3 == uint8(godeadlineTtGoAfFoundTT_AF_READIED)
		}
		if w.Readied {
			// No stack: the probe put a pc in the call's waiting frame.
			if af >= 0 && af < len(p.ext.afAt) {
				w.At = p.ext.afAt[af]
			}
		} else {
			for _, pc := range r.WaiterPcs[i] {
				if pc == 0 {
					break
				}
				// The parked pc is the return address into gopark from mcall;
				// the others are return addresses: pc-1 is the call.
				w.Stack = append(w.Stack, p.bin.SymbolizeFrames(pc-p.bias-1)...)
			}
			w.At = waitingFrame(w.Stack)
		}
		w.Conn, w.ConnFrame, w.ConnFD = p.waiterConn(r, i)
		if w.ConnFD >= 0 {
			w.ConnUnread = r.WaiterUnread[i]
			if w.Conn != 0 {
				w.ConnSend = &event.SendState{Unacked: r.WaiterUnacked[i], CAState: r.WaiterCaState[i],
					RetransOut: r.WaiterRetransOut[i], LostOut: r.WaiterLostOut[i], State: event.TCPState(r.WaiterSkState[i])}
			}
			w.ConnTLS = r.WaiterWrapped[i] != 0
			rcv, snd := r.WaiterRcvAge[i], r.WaiterSndAge[i]
			w.ConnAnswered = rcv <= snd
			w.ConnAnsweredLater = rcv < snd
			// lrcvtime and lsndtime are the ticks of the last segment in
			// and out: at least age-1 whole ticks have passed since the
			// one, at most age+1 since the other.
			if tick := tickOf(r.Jiffies, r.TsNs); tick != 0 && rcv < 1<<30 && snd < 1<<30 {
				if rcv > 1 {
					w.ConnRcvAgo = time.Duration(rcv-1) * tick
				}
				w.ConnSentAgo = time.Duration(snd+1) * tick
			}
		}
		ws = append(ws, w)
	}
	return ws
}

// waitingFrame is where a parked goroutine was waiting: its first frame
// outside the runtime (gopark, selectgo, chanrecv are how, not where).
func waitingFrame(stack []string) string {
	for _, f := range stack {
		if !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "internal/") {
			return f
		}
	}
	return ""
}

// waiterConn is the connection waiter i of r waited on, read from a waiting
// frame of its stack (its cookie and descriptor), and that frame's function. The frame's first argument
// was read from its spill slot, which the compiler writes only when it must
// keep the value across a call: at a pc where the slot is not live it may
// hold an earlier call's receiver, another request's connection, so the
// binding is dropped (counted). A socket no kernel hook has seen yet has no
// cookie: counted, not guessed (its descriptor may already name another
// socket).
func (p *Process) waiterConn(r *godeadlineTtGoEvent, i int) (uint64, string, int32) {
	j := int(r.WaiterFrame[i]) - 1
	if j < 0 {
		return 0, "", -1
	}
	var pc uint64
	if j < len(r.WaiterPcs[i]) {
		pc = r.WaiterPcs[i][j]
	} else if pc = r.WaiterFramePc[i]; pc == 0 { // found past the frames kept (deep_frame)
		return 0, "", -1
	}
	frame := ""
	cl := &p.ext.conns
	for k := range cl.WaitLo {
		if pc > cl.WaitLo[k] && pc <= cl.WaitHi[k] {
			frame = p.ext.waitFrames[k]
		}
	}
	// Found parked reading the inbound connection another waiter's
	// frame named (http.TimeoutHandler's): that frame's spill slots too
	// must have held its arguments.
	if inbound(r, i) {
		if err := p.holderLive(r, int(r.WaiterAf[i]>>2)); err != nil {
			p.mu.Lock()
			p.ext.waitStale++
			p.mu.Unlock()
			p.log.Debug("inbound connection's holder not read", "frame", frame, "err", err)
			return 0, frame, -1
		}
	} else if r.WaiterAf[i] != 0 {
		// The connection came from an AfterFunc's closure, and the
		// goroutine from its poller: no spill slot. The frame is the
		// registering call.
		if af := int(r.WaiterAf[i] >> 2); af < len(p.ext.afNames) {
			frame = p.ext.afNames[af]
		}
		return r.WaiterCookie[i], frame, r.WaiterFd[i]
	}
	if err := p.bin.FirstArgLive(pc - p.bias - 1); err != nil {
		p.mu.Lock()
		p.ext.waitStale++
		p.mu.Unlock()
		p.log.Debug("waiting frame's receiver not read", "frame", frame, "err", err)
		return 0, frame, -1
	}
	if r.WaiterCookie[i] == 0 {
		p.mu.Lock()
		if r.WaiterFd[i] >= 0 {
			p.ext.waitNoCookie++
		}
		p.mu.Unlock()
	}
	return r.WaiterCookie[i], frame, r.WaiterFd[i]
}

// inbound reports whether waiter i of r was found parked reading the
// inbound connection of another waiter's frame (TT_AF_INBOUND).
func inbound(r *godeadlineTtGoEvent, i int) bool {
	return r.WaiterAf[i]&3 == uint8(godeadlineTtGoAfFoundTT_AF_INBOUND)
}

// holderLive checks that the frame through which the probe found an
// inbound connection (in waiter h's stack, a waiting frame of the inbound
// kind) held its argument there: the argument's words (an interface's
// itab and data) were live at that frame's call.
func (p *Process) holderLive(r *godeadlineTtGoEvent, h int) error {
	if h >= len(r.WaiterPcs) {
		return errors.New("no such waiter")
	}
	cl := &p.ext.conns
	for _, pc := range r.WaiterPcs[h][1:] {
		if pc == 0 {
			break
		}
		for k := range cl.WaitLo {
			if cl.WaitInbound[k] == 0 || pc <= cl.WaitLo[k] || pc > cl.WaitHi[k] {
				continue
			}
			at, arg := pc-p.bias-1, uint64(cl.WaitArg[k])
			if cl.WaitItab[k] != 0 {
				if err := p.bin.ArgLive(at, arg-8); err != nil {
					return err
				}
			}
			return p.bin.ArgLive(at, arg)
		}
	}
	return errors.New("its frame is not in its stack")
}
