package goprobe

import (
	"context"
	"testing"
	"unsafe"
)

// canceler has the shape of context's: the children map's key is an
// interface (two words), its value struct{}.
type canceler interface {
	Done() <-chan struct{}
}

// TestChildrenSlotLayout checks, on this toolchain's swiss maps, the
// layout godeadline.bpf.c's child_at reads a cancelCtx's children with:
// a small map's dirPtr (third word of the header) is its one group, a
// control word then 8 slots of 24 bytes ({interface, struct{}}: the
// trailing zero-size field is padded), each child's pointer 8 bytes into
// its slot, filled in order, and a full slot's control byte under 0x80.
func TestChildrenSlotLayout(t *testing.T) {
	const slot = 24 // TT_CHILD_SLOT
	m := map[canceler]struct{}{}
	want := map[uintptr]bool{}
	var keep []context.Context
	for range 5 {
		c, cancel := context.WithCancel(context.Background())
		defer cancel()
		keep = append(keep, c)
		m[c] = struct{}{}
		want[uintptr((*[2]unsafe.Pointer)(unsafe.Pointer(&c))[1])] = true
	}
	// internal/runtime/maps.Map's first fields.
	type mapHeader struct {
		used   uint64
		seed   uintptr
		dirPtr unsafe.Pointer
		dirLen int
	}
	hdr := (*mapHeader)(*(*unsafe.Pointer)(unsafe.Pointer(&m)))
	if hdr.dirLen != 0 {
		t.Fatalf("dirLen %d: a map of %d is not one group", hdr.dirLen, len(m))
	}
	grp := hdr.dirPtr
	ctrl := *(*uint64)(grp)
	for s := range 8 {
		full := (ctrl>>(8*s))&0x80 == 0
		if full != (s < len(m)) {
			t.Errorf("slot %d: control byte %#x, want it full only for the first %d", s, byte(ctrl>>(8*s)), len(m))
		}
		if !full {
			continue
		}
		p := *(*uintptr)(unsafe.Add(grp, 8+slot*s+8))
		if !want[p] {
			t.Errorf("slot %d at stride %d holds %#x, not one of the children %v", s, slot, p, want)
		}
		delete(want, p)
	}
	if len(want) != 0 {
		t.Errorf("children not found at stride %d: %v", slot, want)
	}
	_ = keep
}
