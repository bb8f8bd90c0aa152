package gobin

import (
	"errors"
	"testing"
)

// TestOpenDefers reads net's DialContext open-coded defer layout (its
// deferred cancel proves a dial's deadline its own at the expiry) on both
// architectures: the defer bits and the slots lie inside its frame, apart;
// a function with no defer has none.
func TestOpenDefers(t *testing.T) {
	for _, goarch := range []string{"amd64", "arm64"} {
		t.Run(goarch, func(t *testing.T) {
			b := buildLabapp(t, goarch, goarch)
			fn, err := b.Func("net.(*Dialer).DialContext")
			if err != nil {
				t.Fatal(err)
			}
			od, err := b.OpenDefers(fn)
			if err != nil {
				t.Fatal(err)
			}
			size, err := b.FrameSize(fn)
			if err != nil {
				t.Fatal(err)
			}
			// varp lies at most a word below the frame's top: the slots
			// (words) and the bits below it, inside the frame.
			if od.Slots == od.Bits || od.Slots%8 != 0 || od.Slots > size || od.Bits > size || size%8 != 0 {
				t.Errorf("DialContext: defers %+v, frame size %d", od, size)
			}
			gp, err := b.Func("runtime.gopark")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.OpenDefers(gp); !errors.Is(err, ErrNotFound) {
				t.Errorf("runtime.gopark's open-coded defers: %v, want ErrNotFound", err)
			}
		})
	}
}
