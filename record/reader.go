package record

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/timeout-tracer/tracer/event"
)

// MaxLine is the longest line a Reader accepts. Event lines are a few
// hundred bytes; a deadline's creation stack is the longest field.
const MaxLine = 1 << 20

// LineError is an error in one line of a recording.
type LineError struct {
	Line int // 1-based; the header is line 1
	Err  error
}

// Error says "line N: cause".
func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns the cause.
func (e *LineError) Unwrap() error { return e.Err }

// Reader reads a recording written by Writer.
type Reader struct {
	sc     *bufio.Scanner
	header Header
	n      int   // lines read
	err    error // sticky: the scanner cannot go past a read error
}

// NewReader reads and checks the header. It fails with ErrHeader when the
// input is not a recording and ErrVersion when its version is not one this
// code reads, both inside a *LineError.
func NewReader(r io.Reader) (*Reader, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	rd := &Reader{sc: sc}
	b, err := rd.next()
	if err == io.EOF {
		return nil, &LineError{Line: 1, Err: fmt.Errorf("empty input: %w", ErrHeader)}
	}
	if err != nil {
		return nil, err
	}
	var h Header
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, rd.errorf("%w: %v", ErrHeader, err)
	}
	if h.Format != FormatName {
		return nil, rd.errorf("format %q: %w", h.Format, ErrHeader)
	}
	if h.Version < MinVersion || h.Version > Version {
		return nil, rd.errorf("version %d (this reader knows %d to %d): %w", h.Version, MinVersion, Version, ErrVersion)
	}
	rd.header = h
	return rd, nil
}

// Header returns the recording's header.
func (r *Reader) Header() Header { return r.header }

// Read returns the next event, or io.EOF after the last one. Blank lines
// are skipped. Errors name the line and wrap ErrBadEvent (or
// ErrLineTooLong); reading may go on after a bad line.
func (r *Reader) Read() (event.Any, error) {
	for {
		b, err := r.next()
		if err != nil {
			return nil, err
		}
		if len(b) == 0 {
			continue
		}
		var l line
		if err := json.Unmarshal(b, &l); err != nil {
			return nil, r.errorf("%w: %v", ErrBadEvent, err)
		}
		ev, err := fromLine(&l)
		if err != nil {
			return nil, r.errorf("%w", err)
		}
		return ev, nil
	}
}

// next returns the next line (without its newline) or io.EOF.
func (r *Reader) next() ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.sc.Scan() {
		r.n++
		return r.sc.Bytes(), nil
	}
	err := r.sc.Err()
	switch {
	case err == nil:
		r.err = io.EOF
	case errors.Is(err, bufio.ErrTooLong):
		r.n++
		r.err = r.errorf("longer than %d bytes: %w", MaxLine, ErrLineTooLong)
	default:
		r.n++
		r.err = r.errorf("read: %w", err)
	}
	return nil, r.err
}

func (r *Reader) errorf(format string, args ...any) error {
	return &LineError{Line: r.n, Err: fmt.Errorf(format, args...)}
}
