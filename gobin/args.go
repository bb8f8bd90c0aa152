package gobin

import (
	"errors"
	"fmt"
)

// The liveness tables of register arguments' spill slots (Go 1.18+ on
// register-ABI targets), as runtime.printArgs reads them for tracebacks.
const (
	pcdataArgLiveIndex  = 3
	funcdataArgLiveInfo = 6
)

// ErrNotLive: the argument's spill slot may hold a stale value at that pc.
var ErrNotLive = errors.New("the argument's spill slot is not live there")

// FirstArgLive reports whether, at pc (an instruction of a function, for a
// return address collected from a stack the address minus one), the spill
// slot of the function's first register argument in its caller's frame holds
// the argument's value. Under Go's register ABI the caller reserves that
// slot and the callee writes it only when it must keep the value across a
// call; the compiler records, per pc, which slots it has written
// (FUNCDATA_ArgLiveInfo, PCDATA_ArgLiveIndex). Slots below the table's start
// offset are written at the entry, always live; a function without the
// table spills every argument it keeps at the entry. ErrNotLive when the
// slot may hold an earlier call's value.
func (b *Binary) FirstArgLive(pc uint64) error {
	p, err := b.lineTable()
	if err != nil {
		return err
	}
	t := p.funcs
	if t == nil {
		return fmt.Errorf("argument liveness at %#x: %w", pc, ErrNoOffsets)
	}
	f, err := t.find(pc)
	if err != nil {
		return err
	}
	info, ok := t.funcdata(f, funcdataArgLiveInfo)
	if !ok {
		return nil
	}
	start, err := b.read(info, 1)
	if err != nil {
		return fmt.Errorf("argument liveness of %s: %w", t.funcName(f.nameOff), err)
	}
	if start[0] > 0 { // the first argument's slot is at offset 0
		return nil
	}
	ix := t.pcdata(f, pcdataArgLiveIndex, pc)
	if ix <= 0 {
		return nil
	}
	bits, err := b.read(info+uint64(ix), 1)
	if err != nil {
		return fmt.Errorf("argument liveness of %s: %w", t.funcName(f.nameOff), err)
	}
	if bits[0]&1 == 0 {
		return fmt.Errorf("%s at %#x: %w", t.funcName(f.nameOff), pc, ErrNotLive)
	}
	return nil
}
