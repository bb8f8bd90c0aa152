package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/timeout-tracer/tracer/event"
)

// Writer writes a recording: the header, then one line per event. Each
// line goes to the underlying writer in one Write, so a recording cut short
// by a crash loses at most its last line; wrap w in a bufio.Writer for
// throughput (and flush it).
type Writer struct {
	w   io.Writer
	buf bytes.Buffer
	enc *json.Encoder
	l   line
}

// NewWriter writes the header (Format and Version are filled in) and
// returns a Writer for the events.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	h.Format, h.Version = FormatName, Version
	rw := &Writer{w: w}
	rw.enc = json.NewEncoder(&rw.buf)
	rw.enc.SetEscapeHTML(false)
	if err := rw.enc.Encode(h); err != nil {
		return nil, fmt.Errorf("encode recording header: %w", err)
	}
	if err := rw.flush(); err != nil {
		return nil, fmt.Errorf("write recording header: %w", err)
	}
	return rw, nil
}

// Write appends one event.
func (w *Writer) Write(ev event.Any) error {
	if err := toLine(ev, &w.l); err != nil {
		return fmt.Errorf("record event: %w", err)
	}
	if err := w.enc.Encode(&w.l); err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	if err := w.flush(); err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	return nil
}

func (w *Writer) flush() error {
	_, err := w.w.Write(w.buf.Bytes())
	w.buf.Reset()
	return err
}
