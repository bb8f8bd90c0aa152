package correlate

import (
	"slices"

	"github.com/timeout-tracer/tracer/event"
)

// Merge puts the events of several sources into one stream in event-time
// order. Each source hands over its events as they arrive and says how far
// it has come: Progress(src, t) means it will hand over no event before t
// any more. Release gives out, in time order, the events before the lowest
// of the sources' marks (the watermark): the merge waits for the slowest
// source, however late its events arrive, and never for the wall clock.
// A source whose event arrives behind what was already released is
// counted (Late) and its event released at once, never dropped.
type Merge struct {
	marks    []uint64
	done     []bool
	buf      []event.Any
	released uint64 // the watermark of the last Release
	late     uint64
}

// NewMerge returns a Merge of n sources, all at time 0.
func NewMerge(n int) *Merge {
	return &Merge{marks: make([]uint64, n), done: make([]bool, n)}
}

// Add takes one event of any source.
func (m *Merge) Add(ev event.Any) {
	if ev.MonoTime() < m.released {
		m.late++
	}
	m.buf = append(m.buf, ev)
}

// Progress says source src will hand over no more events before t. Marks
// never go back.
func (m *Merge) Progress(src int, t uint64) {
	m.marks[src] = max(m.marks[src], t)
}

// Done says source src has ended: it holds nothing back any more.
func (m *Merge) Done(src int) { m.done[src] = true }

// Watermark is the time before which every source has handed over all its
// events: the lowest mark of the sources that have not ended (the highest
// mark when all have).
func (m *Merge) Watermark() uint64 {
	w, hi, any := ^uint64(0), uint64(0), false
	for i, t := range m.marks {
		hi = max(hi, t)
		if !m.done[i] {
			w, any = min(w, t), true
		}
	}
	if !any {
		return hi
	}
	return w
}

// Buffered is the number of events waiting for the watermark.
func (m *Merge) Buffered() int { return len(m.buf) }

// Late is the number of events that arrived behind an earlier release.
func (m *Merge) Late() uint64 { return m.late }

// Release hands the events before the watermark to fn in time order (the
// order of arrival among equal times) and returns the watermark. An error
// from fn stops the release; the events not yet handed stay buffered.
func (m *Merge) Release(fn func(event.Any) error) (uint64, error) {
	w := m.Watermark()
	return w, m.releaseUpTo(w, fn)
}

// Drain hands every buffered event to fn in time order, at the end of the
// stream.
func (m *Merge) Drain(fn func(event.Any) error) error { return m.releaseUpTo(^uint64(0), fn) }

func (m *Merge) releaseUpTo(w uint64, fn func(event.Any) error) error {
	slices.SortStableFunc(m.buf, func(a, b event.Any) int {
		ma, mb := a.MonoTime(), b.MonoTime()
		switch {
		case ma < mb:
			return -1
		case ma > mb:
			return 1
		}
		return 0
	})
	n := 0
	var err error
	for ; n < len(m.buf) && m.buf[n].MonoTime() < w; n++ {
		if err = fn(m.buf[n]); err != nil {
			n++
			break
		}
	}
	rest := copy(m.buf, m.buf[n:])
	clear(m.buf[rest:]) // keep no reference to a released event
	m.buf = m.buf[:rest]
	if w != ^uint64(0) {
		m.released = max(m.released, w)
	}
	return err
}
