package collector

import (
	"errors"
	"log/slog"
	"os"
	"sync"
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
	for {
		if r.f != nil {
			if !r.wait(poll) {
				return
			}
			if !r.ready() {
				continue // the poll interval passed with nothing to read: no system call
			}
			r.rd.SetDeadline(time.Now()) // drain what is there, without blocking
		} else {
			r.rd.SetDeadline(tick.Next(poll))
		}
		for {
			err := r.rd.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) {
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
