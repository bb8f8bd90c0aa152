package gobin

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Function names of the context package that the deadline probes use.
const (
	fnWithDeadlineCause = "context.WithDeadlineCause" // Go ≥ 1.21
	fnWithDeadline      = "context.WithDeadline"      // before Go 1.21 it holds the timer logic
	fnTimerCtxCancel    = "context.(*timerCtx).cancel"
	symDeadlineExceeded = "context.DeadlineExceeded"
)

// CancelCall is a call to (*timerCtx).cancel inside the deadline
// constructor.
type CancelCall struct {
	Addr       uint64 // address of the CALL/BL instruction
	FileOffset uint64 // its file offset, for the uprobe
	// Expired is true when the call passes context.DeadlineExceeded: that is
	// the "deadline already passed" branch (dur <= 0), whose probe sees the
	// *timerCtx in the first argument register. Other calls (none in Go
	// 1.17–1.27) would pass Canceled and must not count as expiries.
	Expired bool
}

// DeadlineSites are the cold-path probe points of context deadlines.
type DeadlineSites struct {
	// Constructor is context.WithDeadlineCause (Go ≥ 1.21), or
	// context.WithDeadline for older binaries.
	Constructor Func
	// Timer is the closure the constructor hands to time.AfterFunc; it runs
	// only when a deadline expires, with the *timerCtx in its closure.
	// Probe it at AfterPrologue(Timer).
	Timer Func
	// CancelCalls are all the calls to (*timerCtx).cancel inside
	// Constructor; those with Expired set are the expiry probe points.
	CancelCalls []CancelCall
}

// DeadlineSites finds the deadline-expiry probe points. The timer closure is
// found by what it does, not by its name (closure numbering changes across
// Go versions): of the constructor's closures ("<constructor>.func*") that
// call (*timerCtx).cancel, it is the one that passes the same error value as
// the constructor's own already-expired call, DeadlineExceeded; the others
// are the CancelFuncs returned to the caller, which pass Canceled. The error
// value is recognised by the address of the global it is loaded from (the
// context.DeadlineExceeded symbol when .symtab is present; in stripped
// binaries the interface-valued global the constructor's own cancel call
// loads: every Go release so far has a single such call, the dur <= 0 one).
// When the evidence is ambiguous it returns an error rather than guess.
//
// The answer depends on the file alone: it is computed once and kept
// across Release (see Binary.results), each caller getting its own copy.
func (b *Binary) DeadlineSites() (*DeadlineSites, error) {
	ds, err := b.results.deadlineSites.get(b.deadlineSites)
	if ds == nil {
		return nil, err
	}
	c := *ds
	c.CancelCalls = slices.Clone(ds.CancelCalls)
	return &c, err
}

func (b *Binary) deadlineSites() (*DeadlineSites, error) {
	cancel, err := b.Func(fnTimerCtxCancel)
	if err != nil {
		return nil, fmt.Errorf("find deadline sites: %w", err)
	}
	ctor, err := b.Func(fnWithDeadlineCause)
	if errors.Is(err, ErrNotFound) {
		ctor, err = b.Func(fnWithDeadline)
	}
	if err != nil {
		return nil, fmt.Errorf("find deadline sites: %w", err)
	}
	calls, err := b.callWindows(ctor, cancel)
	if err != nil {
		return nil, fmt.Errorf("find deadline sites: %w", err)
	}
	if len(calls) == 0 {
		return nil, fmt.Errorf("find deadline sites: no call to %s in %s: %w", cancel.Name, ctor.Name, ErrNotFound)
	}

	// The addresses identifying DeadlineExceeded: its symbol, else what
	// the constructor's cancel calls load.
	var expiredRefs []uint64
	s, ok, err := b.symbol(symDeadlineExceeded)
	if err != nil {
		return nil, fmt.Errorf("find deadline sites: %w", err)
	}
	if ok {
		expiredRefs = []uint64{s.Value}
	} else {
		for _, c := range calls {
			expiredRefs = append(expiredRefs, interfaceLoads(c.refs, uint64(b.ptr))...)
		}
	}

	sites := &DeadlineSites{Constructor: ctor}
	for _, c := range calls {
		off, err := b.FileOffset(c.pc)
		if err != nil {
			return nil, fmt.Errorf("find deadline sites: %w", err)
		}
		sites.CancelCalls = append(sites.CancelCalls, CancelCall{Addr: c.pc, FileOffset: off, Expired: sharesRef(c.refs, expiredRefs)})
	}

	closures, err := b.Funcs(ctor.Name + ".func")
	if err != nil {
		return nil, fmt.Errorf("find deadline sites: %w", err)
	}
	var callers []string
	var timers []Func
	for _, fn := range closures {
		cc, err := b.callWindows(fn, cancel)
		if err != nil {
			return nil, fmt.Errorf("find deadline sites: %w", err)
		}
		if len(cc) > 0 {
			callers = append(callers, fn.Name)
		}
		if slices.ContainsFunc(cc, func(c callWindow) bool { return sharesRef(c.refs, expiredRefs) }) {
			timers = append(timers, fn)
		}
	}
	if len(timers) != 1 {
		return nil, fmt.Errorf("find deadline sites: %d closures of %s pass DeadlineExceeded to %s (of %d that call it: %s): %w",
			len(timers), ctor.Name, cancel.Name, len(callers), strings.Join(callers, ", "), ErrNotFound)
	}
	sites.Timer = timers[0]
	return sites, nil
}

// callWindow is a call to a given function, with the data addresses loaded
// PC-relatively since the previous call: where its arguments came from.
type callWindow struct {
	pc   uint64
	refs []uint64
}

// callWindows disassembles fn and returns its direct calls to callee.
func (b *Binary) callWindows(fn, callee Func) ([]callWindow, error) {
	insts, err := b.disassemble(fn)
	if err != nil {
		return nil, err
	}
	var out []callWindow
	var refs []uint64
	for _, i := range insts {
		refs = append(refs, i.refs...)
		if i.kind != kindCall {
			continue
		}
		if i.target == callee.Entry {
			out = append(out, callWindow{pc: i.pc, refs: refs})
		}
		refs = nil
	}
	return out, nil
}

// interfaceLoads returns the addresses among refs whose next word is loaded
// too: the globals loaded as a two-word interface value, like an error.
// This leaves out one-word flags such as runtime.writeBarrier.
func interfaceLoads(refs []uint64, ptr uint64) []uint64 {
	var out []uint64
	for _, r := range refs {
		if slices.Contains(refs, r+ptr) {
			out = append(out, r)
		}
	}
	return out
}

// sharesRef reports whether a call's loads include the first word of one of
// the globals in globals.
func sharesRef(refs, globals []uint64) bool {
	for _, r := range refs {
		if slices.Contains(globals, r) {
			return true
		}
	}
	return false
}
