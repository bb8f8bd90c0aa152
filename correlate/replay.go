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

// Replay runs a fresh Stream over src to its end, writing to out, and
// returns the correlator's counters. It stops at the first error of src or
// out.
func Replay(src Source, cfg StreamConfig, out Output) (Stats, error) {
	s, err := NewStream(cfg, out)
	if err != nil {
		return Stats{}, err
	}
	for {
		ev, err := src.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return s.corr.Stats(), fmt.Errorf("read events: %w", err)
		}
		if err := s.Push(ev); err != nil {
			return s.corr.Stats(), fmt.Errorf("emit: %w", err)
		}
	}
	if err := s.Flush(); err != nil {
		return s.corr.Stats(), fmt.Errorf("emit: %w", err)
	}
	return s.corr.Stats(), nil
}

// Outputs is an Output made of optional functions: a nil one drops what
// it would get.
type Outputs struct {
	KernelFunc func(*event.TCP) error
	EventFunc  func(event.Any) error
	ReportFunc func(*Report) error
	AuditFunc  func(*AuditLine) error
}

// Kernel calls KernelFunc.
func (o Outputs) Kernel(t *event.TCP) error { return callIf(o.KernelFunc, t) }

// Event calls EventFunc.
func (o Outputs) Event(ev event.Any) error { return callIf(o.EventFunc, ev) }

// Report calls ReportFunc.
func (o Outputs) Report(r *Report) error { return callIf(o.ReportFunc, r) }

// Audit calls AuditFunc.
func (o Outputs) Audit(l *AuditLine) error { return callIf(o.AuditFunc, l) }

func callIf[T any](f func(T) error, v T) error {
	if f == nil {
		return nil
	}
	return f(v)
}
