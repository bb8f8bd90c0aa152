package gobin

import (
	"errors"
	"fmt"
)

// The liveness tables of register arguments' spill slots (Go 1.18+ on
// register-ABI targets), as runtime.printArgs reads them for tracebacks.
const (
	pcdataArgLiveIndex  = 3
	funcdataArgInfo     = 5
	funcdataArgLiveInfo = 6
)

// The argument layout's markers (FUNCDATA_ArgInfo, internal/abi's
// TraceArgs*): a sequence of (offset, size) pairs of the arguments' words,
// aggregates between start and end marks.
const (
	traceArgsEndSeq         = 0xff
	traceArgsStartAgg       = 0xfe
	traceArgsEndAgg         = 0xfd
	traceArgsDotdotdot      = 0xfc
	traceArgsOffsetTooLarge = 0xfb
	traceArgsMaxLen         = (5*3+2)*10 + 1 // internal/abi.TraceArgsMaxLen: a layout's bytes at most
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
func (b *Binary) FirstArgLive(pc uint64) error { return b.ArgLive(pc, 0) }

// ArgLive is FirstArgLive for the register argument word whose spill slot
// is off bytes into the function's arguments (the second pointer argument
// of a method: 8 on 64-bit targets). The liveness table indexes slots in
// the order of the argument layout (FUNCDATA_ArgInfo), counting those at
// or above the table's start offset, as runtime.printArgs reads it; a
// word the layout does not list is an error.
func (b *Binary) ArgLive(pc, off uint64) error {
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
	if off < uint64(start[0]) { // written at the entry
		return nil
	}
	slot := uint64(0)
	if off > 0 {
		layout, ok := t.funcdata(f, funcdataArgInfo)
		if !ok {
			return fmt.Errorf("argument liveness of %s: no argument layout", t.funcName(f.nameOff))
		}
		if slot, err = b.argSlot(layout, off, uint64(start[0])); err != nil {
			return fmt.Errorf("argument liveness of %s: %w", t.funcName(f.nameOff), err)
		}
	}
	ix := t.pcdata(f, pcdataArgLiveIndex, pc)
	if ix <= 0 {
		return nil
	}
	bits, err := b.read(info+uint64(ix)+slot/8, 1)
	if err != nil {
		return fmt.Errorf("argument liveness of %s: %w", t.funcName(f.nameOff), err)
	}
	if bits[0]&(1<<(slot%8)) == 0 {
		return fmt.Errorf("%s at %#x: %w", t.funcName(f.nameOff), pc, ErrNotLive)
	}
	return nil
}

// argSlot is the index in the liveness bitmap of the argument word at off,
// from the argument layout at addr: the words listed before it at or above
// start, the table's first offset.
func (b *Binary) argSlot(addr, off, start uint64) (uint64, error) {
	var p []byte
	var err error
	// A layout near the end of its segment: read what is there.
	for n := uint64(traceArgsMaxLen); n > 0; n /= 2 {
		if p, err = b.read(addr, n); err == nil {
			break
		}
	}
	if err != nil {
		return 0, err
	}
	slot := uint64(0)
	for i := 0; i < len(p); {
		o := p[i]
		i++
		switch o {
		case traceArgsEndSeq:
			return 0, fmt.Errorf("no argument word at offset %d", off)
		case traceArgsStartAgg, traceArgsEndAgg:
			continue
		case traceArgsDotdotdot, traceArgsOffsetTooLarge:
			return 0, fmt.Errorf("argument word at offset %d not in the layout", off)
		}
		if i >= len(p) {
			break
		}
		i++ // its size
		if uint64(o) == off {
			return slot, nil
		}
		if uint64(o) >= start {
			slot++
		}
	}
	return 0, corruptf("argument layout at %#x has no end", addr)
}
