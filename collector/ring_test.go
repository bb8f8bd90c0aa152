package collector

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/timeout-tracer/tracer/lab/testenv"
	"github.com/timeout-tracer/tracer/tick"
)

// An idle ring says its progress at each poll, and at once when kicked:
// the merge's watermark need not wait a poll interval for a quiet source.
func TestRingProgressAndKick(t *testing.T) {
	testenv.Root(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 4096})
	if err != nil {
		t.Skipf("no ring buffer map here: %v", err)
	}
	defer m.Close()
	r, err := NewRing(m)
	if err != nil {
		t.Fatal(err)
	}
	if r.f == nil {
		t.Fatal("the ring is not in the netpoller: Kick cannot work")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Consume(10*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)), func([]byte) bool { return true })
	}()
	defer func() { r.Close(); <-done }()
	// The first look at the ring comes at once.
	for deadline := time.Now().Add(2 * time.Second); r.Progress() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no progress 2 s after the start (the poll is 10 s)")
		}
	}
	time.Sleep(50 * time.Millisecond)
	before := tick.Mono()
	r.Kick()
	for deadline := time.Now().Add(2 * time.Second); r.Progress() < before-uint64(Slack); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a kick did not make the ring say its progress (behind by %v)", time.Duration(tick.Mono()-r.Progress()))
		}
	}
}
