package record

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/timeout-tracer/tracer/event"
)

// FuzzReader feeds arbitrary bytes to the Reader. It proves that reading
// never panics, that every error names its line, and that what is read is
// stable: writing the events back and reading them again gives the same
// bytes (the first write may normalise, e.g. times to UTC).
func FuzzReader(f *testing.F) {
	const hdr = `{"format":"timeout-tracer-events","version":1,"host":"h","started":"2026-11-29T17:00:00Z"}` + "\n"
	f.Add([]byte(hdr + `{"type":"tcp","mono":1,"kind":"rto","peer":"10.0.0.2:80","state":"ESTABLISHED","rto":"204ms","backoff":1}` + "\n"))
	f.Add([]byte(hdr + `{"type":"deadline","mono":5,"pid":3,"detail":true,"created_mono":2,"created_stack":["a"],"deadline":"2026-11-29T17:00:01Z","kind":"timer_fired"}` + "\n"))
	f.Add([]byte(hdr + `{"type":"activity","mono":2,"cookie":4,"local":"[::1]:5","sent":true}` + "\n" + `{"type":"binding","mono":3,"goid":9,"source":"kernel_g"}` + "\n"))
	f.Add([]byte(hdr + `{"type":"tcp","mono":1,"kind":"activity","state":"state(42)","ca_state":"ca(7)","errno":-1}` + "\n"))
	f.Add([]byte(`{"format":"timeout-tracer-events","version":2}`))
	f.Add([]byte("\x00\xff{"))
	f.Fuzz(func(t *testing.T, in []byte) {
		first, err := readAll(in)
		if err != nil {
			var le *LineError
			if !errors.As(err, &le) || le.Line < 1 {
				t.Fatalf("error without a line: %v", err)
			}
		}
		again, err := readAll(first)
		if err != nil {
			t.Fatalf("re-reading what was written: %v\n%s", err, first)
		}
		if !bytes.Equal(first, again) {
			t.Fatalf("not stable:\n%s\n%s", first, again)
		}
	})
}

// readAll reads a recording up to its first error and writes what it read
// back out; the header is always written, so the output is readable.
func readAll(in []byte) ([]byte, error) {
	var out bytes.Buffer
	r, rerr := NewReader(bytes.NewReader(in))
	var h Header
	if r != nil {
		h = r.Header()
	}
	w, err := NewWriter(&out, h)
	if err != nil {
		return out.Bytes(), err
	}
	for r != nil && rerr == nil {
		var ev event.Any
		ev, rerr = r.Read()
		if rerr != nil {
			break
		}
		if err := w.Write(ev); err != nil {
			return out.Bytes(), err
		}
	}
	if rerr == io.EOF {
		rerr = nil
	}
	return out.Bytes(), rerr
}
