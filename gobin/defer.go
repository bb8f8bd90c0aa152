package gobin

import (
	"encoding/binary"
	"fmt"
)

// funcdataOpenCodedDeferInfo is FUNCDATA_OpenCodedDeferInfo: where a
// function's open-coded defers keep their state in its frame.
const funcdataOpenCodedDeferInfo = 4

// OpenDefers is where a function's open-coded defers keep their state in
// its frame, as the runtime reads them to run the defers during a panic:
// the byte of defer bits (bit i set once defer statement i has run) at
// varp - Bits, and the deferred function values at varp - Slots, one word
// per defer statement in the order of the source. varp is the frame's
// locals pointer: on amd64 the frame pointer itself; on arm64 the frame
// pointer plus the frame's size (FrameSize), the saved frame pointer
// lying just below the frame's stack pointer.
type OpenDefers struct {
	Bits, Slots uint64
}

// OpenDefers reads fn's open-coded defer layout (FUNCDATA_OpenCodedDeferInfo:
// two unsigned varints). ErrNotFound when fn has none (no defer, or defers
// the compiler did not open-code: in a loop, too many).
func (b *Binary) OpenDefers(fn Func) (OpenDefers, error) {
	t, f, err := b.funcRecord(fn, "open-coded defers")
	if err != nil {
		return OpenDefers{}, err
	}
	info, ok := t.funcdata(f, funcdataOpenCodedDeferInfo)
	if !ok {
		return OpenDefers{}, fmt.Errorf("open-coded defers of %s: %w", fn.Name, ErrNotFound)
	}
	var buf []byte
	// Near the end of its segment: read what is there.
	for n := uint64(2 * binary.MaxVarintLen64); n > 0; n /= 2 {
		if buf, err = b.read(info, n); err == nil {
			break
		}
	}
	if err != nil {
		return OpenDefers{}, fmt.Errorf("open-coded defers of %s: %w", fn.Name, err)
	}
	bits, n1 := binary.Uvarint(buf)
	if n1 <= 0 {
		return OpenDefers{}, corruptf("open-coded defer info of %s at %#x", fn.Name, info)
	}
	slots, n2 := binary.Uvarint(buf[n1:])
	if n2 <= 0 || bits == 0 || slots == 0 {
		return OpenDefers{}, corruptf("open-coded defer info of %s at %#x", fn.Name, info)
	}
	return OpenDefers{Bits: bits, Slots: slots}, nil
}

// FrameSize is how far fn's stack pointer lies below its value at the
// entry, in fn's body: the largest value of its PC-SP table (the body's;
// the prologue's and the stack-growth path's are smaller). On amd64 it
// counts the saved frame pointer, not the return address.
func (b *Binary) FrameSize(fn Func) (uint64, error) {
	t, f, err := b.funcRecord(fn, "frame size")
	if err != nil {
		return 0, err
	}
	if f.pcsp == 0 {
		return 0, fmt.Errorf("frame size of %s: no PC-SP table: %w", fn.Name, ErrNotFound)
	}
	size := int32(-1)
	t.pcvalues(f, f.pcsp, func(val int32, end uint64) bool {
		size = max(size, val)
		return end < fn.End
	})
	if size < 0 {
		return 0, corruptf("PC-SP table of %s", fn.Name)
	}
	return uint64(size), nil
}

// funcRecord is fn's function record in the pclntab, what names the
// lookup in its errors.
func (b *Binary) funcRecord(fn Func, what string) (*funcTab, funcRecord, error) {
	p, err := b.lineTable()
	if err != nil {
		return nil, funcRecord{}, err
	}
	if p.funcs == nil {
		return nil, funcRecord{}, fmt.Errorf("%s of %s: %w", what, fn.Name, ErrNoOffsets)
	}
	f, err := p.funcs.find(fn.Entry)
	return p.funcs, f, err
}
