package collector

import (
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// readRing reads rd until it is closed, handing each sample to handle. The
// programs submit with batched wakeups, so the read polls every poll: no
// sample waits longer than that. handle returns false to stop (the
// consumer is gone). Read errors other than closing are logged and end
// the loop.
func readRing(rd *ringbuf.Reader, poll time.Duration, log *slog.Logger, handle func(raw []byte) bool) {
	var rec ringbuf.Record
	for {
		rd.SetDeadline(time.Now().Add(poll))
		err := rd.ReadInto(&rec)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			continue
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
