package correlate

import (
	"errors"
	"fmt"
	"io"

	"github.com/timeout-tracer/tracer/event"
)

// Source is a stream of events in time order that ends with io.EOF, such
// as a *record.Reader.
type Source interface {
	Read() (event.Any, error)
}

// Replay runs a fresh correlator over src to its end and hands each report
// to emit, in order. It stops at the first error of src or emit.
func Replay(src Source, cfg Config, emit func(*Report) error) (Stats, error) {
	c, err := New(cfg)
	if err != nil {
		return Stats{}, err
	}
	send := func(rs []Report) error {
		for i := range rs {
			if err := emit(&rs[i]); err != nil {
				return fmt.Errorf("emit report: %w", err)
			}
		}
		return nil
	}
	for {
		ev, err := src.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return c.Stats(), fmt.Errorf("read events: %w", err)
		}
		if err := send(c.Push(ev)); err != nil {
			return c.Stats(), err
		}
	}
	err = send(c.Flush())
	return c.Stats(), err
}
