package collector

import (
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/timeout-tracer/tracer/tick"
)

// Ring is a ring buffer reader that waits in the Go netpoller.
//
// ringbuf.Reader waits in a blocking epoll_wait: the goroutine holds its
// thread and P in a system call, and after 10 ms the runtime's sysmon
// takes the P back, which resets sysmon's own back-off to 20 µs sleeps.
// With half a dozen readers re-arming their poll deadlines, an idle
// `tracer trace` woke ~570 times a second in sysmon alone (3.6 % of a
// core on the development machines, where a context switch is dear).
// Here the wait is a parked goroutine on a non-blocking duplicate of the
// map's descriptor (ring buffer maps are pollable), and the reader only
// drains, never blocks.
type Ring struct {
	rd *ringbuf.Reader
	f  *os.File // nil: not in the netpoller, the reader's blocking wait is used
	rc syscall.RawConn

	mu     sync.RWMutex
	closed bool

	// progress is the monotonic time before which every sample the ring
	// held has been handed to Consume's handle (see Progress).
	progress atomic.Uint64
}

// Slack is how long a BPF program may take between reading its timestamp
// and committing its sample (microseconds, unless a uprobe's program is
// preempted): Progress stays this far behind the moment it drained the
// ring.
const Slack = 5 * time.Millisecond

// Progress is the monotonic time before which every sample of the ring has
// been handed to Consume's handle (and so, by the collectors, sent on their
// channels): the merge's watermark for this source. 0 until the first
// drain.
func (r *Ring) Progress() uint64 { return r.progress.Load() }

// Kick makes a Consume waiting for its next poll look at the ring now, and
// so say its progress, instead of up to a poll interval later.
func (r *Ring) Kick() {
	if r.f != nil {
		r.f.SetReadDeadline(time.Now())
	}
}

// drained says the ring was empty at t (everything committed before it has
// been handled).
func (r *Ring) drained(t uint64) {
	if t > uint64(Slack) {
		r.progress.Store(t - uint64(Slack))
	}
}

// NewRing opens a reader of ring buffer map m.
func NewRing(m *ebpf.Map) (*Ring, error) {
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, err
	}
	r := &Ring{rd: rd}
	fd, err := unix.FcntlInt(uintptr(m.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return r, nil
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return r, nil
	}
	f := os.NewFile(uintptr(fd), "ringbuf")
	rc, err := f.SyscallConn()
	if err != nil || f.SetReadDeadline(time.Time{}) != nil { // no deadline: not in the netpoller
		f.Close()
		return r, nil
	}
	r.f, r.rc = f, rc
	return r, nil
}

// Close interrupts a wait and frees the reader.
func (r *Ring) Close() error {
	if r.f != nil {
		r.f.Close()
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return r.rd.Close()
}

// ready reports whether a sample waits, or the ring is closed.
func (r *Ring) ready() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.closed || r.rd.AvailableBytes() > 0
}

// wait parks until the ring holds a sample (a wakeup from the kernel) or d
// passed (samples submitted without a wakeup). It returns false when the
// ring was closed.
func (r *Ring) wait(d time.Duration) bool {
	if r.ready() {
		return !r.isClosed()
	}
	r.f.SetReadDeadline(tick.Next(d)) // with the tracer's other timers (package tick)
	err := r.rc.Read(func(uintptr) bool { return r.ready() })
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	return !r.isClosed()
}

func (r *Ring) isClosed() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.closed
}

// Consume reads the ring until it is closed, handing each sample to handle.
// Some programs submit without a wakeup (batched), so the read polls every
// poll: no sample waits longer than that. handle returns false to stop
// (the consumer is gone). Read errors other than closing are logged and
// end the loop.
func (r *Ring) Consume(poll time.Duration, log *slog.Logger, handle func(raw []byte) bool) {
	var rec ringbuf.Record
	first := true // the first look is at once: a source says its progress from the start
	for {
		var t uint64 // when the drain below started: everything before it is read by its end
		if r.f != nil {
			if !first && !r.wait(poll) {
				return
			}
			first = false
			t = tick.Mono()
			if !r.ready() {
				r.drained(t)
				continue // the poll interval passed with nothing to read: no system call
			}
			r.rd.SetDeadline(time.Now()) // drain what is there, without blocking
		} else {
			r.rd.SetDeadline(tick.Next(poll))
		}
		for {
			if r.f == nil {
				t = tick.Mono() // the blocking read returns what came before its deadline
			}
			err := r.rd.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				r.drained(t)
				break
			}
			switch {
			case errors.Is(err, ringbuf.ErrClosed):
				return
			case err != nil:
				log.Error("read ring buffer", "err", err)
				return
			}
			if !handle(rec.RawSample) {
				return
			}
		}
	}
}
