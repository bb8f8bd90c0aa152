package pipeline

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/record"
)

// Sink gets what the pipeline produces, on Run's goroutine only, in stream
// order: every event of the merged stream (Event; a recording), every
// kernel TCP event (Kernel; metrics), every report, every audit line, and
// every switch of the tracer's own probes. An error ends Run.
//
// Embed Nop to implement only some; join several with Tee. The sinks the
// commands use are below: Recorder, Writer, Metrics, Exporter, SwitchLines,
// LogSwitches, Reports.
type Sink interface {
	correlate.Output
	// Switch gets each switch of a process's detail tier or of the storm
	// guard.
	Switch(Switch) error
}

// Switch is a change of the probes on one process.
type Switch struct {
	Time time.Time
	PID  uint32
	// Storm: the storm guard detached (On) or reattached the probes —
	// with Shed only the detail tier and the call probes, the cold tier
	// staying; otherwise the detail tier went on or off.
	Storm  bool
	Shed   bool
	On     bool
	Reason string
}

// Nop is a Sink that takes everything and does nothing: embed it.
type Nop struct{}

func (Nop) Kernel(*event.TCP) error          { return nil }
func (Nop) Event(event.Any) error            { return nil }
func (Nop) Report(*correlate.Report) error   { return nil }
func (Nop) Audit(*correlate.AuditLine) error { return nil }
func (Nop) Switch(Switch) error              { return nil }

// Reports is a Sink of reports only.
type Reports func(*correlate.Report) error

func (Reports) Kernel(*event.TCP) error            { return nil }
func (Reports) Event(event.Any) error              { return nil }
func (f Reports) Report(r *correlate.Report) error { return f(r) }
func (Reports) Audit(*correlate.AuditLine) error   { return nil }
func (Reports) Switch(Switch) error                { return nil }

// Switches is a Sink of probe switches only.
type Switches func(Switch) error

func (Switches) Kernel(*event.TCP) error          { return nil }
func (Switches) Event(event.Any) error            { return nil }
func (Switches) Report(*correlate.Report) error   { return nil }
func (Switches) Audit(*correlate.AuditLine) error { return nil }
func (f Switches) Switch(s Switch) error          { return f(s) }

// Tee hands everything to each sink in turn, in order (an enriching sink
// first, then the ones that read what it added). Every sink gets every
// value even when one fails; the errors are joined.
func Tee(sinks ...Sink) Sink {
	var t tee
	for _, s := range sinks {
		switch s := s.(type) {
		case nil:
		case tee:
			t = append(t, s...)
		default:
			t = append(t, s)
		}
	}
	return t
}

type tee []Sink

func (t tee) each(f func(Sink) error) error {
	var errs []error
	for _, s := range t {
		if err := f(s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (t tee) Kernel(e *event.TCP) error { return t.each(func(s Sink) error { return s.Kernel(e) }) }
func (t tee) Event(ev event.Any) error  { return t.each(func(s Sink) error { return s.Event(ev) }) }
func (t tee) Report(r *correlate.Report) error {
	return t.each(func(s Sink) error { return s.Report(r) })
}
func (t tee) Audit(l *correlate.AuditLine) error {
	return t.each(func(s Sink) error { return s.Audit(l) })
}
func (t tee) Switch(w Switch) error { return t.each(func(s Sink) error { return s.Switch(w) }) }

// Recorder writes the merged stream to an event file (tracer record,
// tracer trace --record) and counts what it wrote.
type Recorder struct {
	Nop
	W *record.Writer
	N int
}

func (r *Recorder) Event(ev event.Any) error {
	r.N++
	return r.W.Write(ev)
}

// Writer writes reports, audit lines and detail switches as text or JSON
// lines (tracer trace; the daemon's --output). Storm switches are not its
// business: SwitchLines or LogSwitches say them.
type Writer struct {
	Nop
	W *export.TimeoutWriter
	// Details: write the detail tier's switches among the reports.
	Details bool
}

func (w Writer) Report(r *correlate.Report) error { return w.W.WriteReport(r) }

func (w Writer) Audit(l *correlate.AuditLine) error {
	switch l.Kind {
	case correlate.AuditMissing:
		return w.W.WriteMissing(&l.Call, l.Peer)
	case correlate.AuditHung:
		return w.W.WriteHung(&l.Call, l.Peer, l.Waiting, l.Conn)
	}
	return nil
}

func (w Writer) Switch(s Switch) error {
	if s.Storm || !w.Details {
		return nil
	}
	return w.W.WriteDetail(s.Time, s.PID, s.On, s.Reason)
}

// Metrics feeds the Prometheus metrics: reports, kernel TCP events, calls
// and hung calls.
type Metrics struct {
	Nop
	M *export.Metrics
}

func (m Metrics) Kernel(e *event.TCP) error { m.M.ObserveTCP(e); return nil }

func (m Metrics) Event(ev event.Any) error {
	if c, ok := ev.(*event.Call); ok {
		m.M.ObserveCall(c)
	}
	return nil
}

func (m Metrics) Report(r *correlate.Report) error { m.M.Export(r); return nil }

func (m Metrics) Audit(l *correlate.AuditLine) error {
	if l.Kind == correlate.AuditHung {
		m.M.ObserveHung(&l.Call)
	}
	return nil
}

// Exporter hands each report to an exporter (OTLP): it never blocks.
type Exporter struct {
	Nop
	X export.Exporter
}

func (x Exporter) Report(r *correlate.Report) error { x.X.Export(r); return nil }

// SwitchLines says each storm switch, and with Details each detail switch,
// as a line on W (stderr).
type SwitchLines struct {
	Nop
	W       io.Writer
	Details bool
}

func (l SwitchLines) Switch(s Switch) error {
	switch {
	case s.Storm:
		state := "probes reattached"
		switch {
		case s.Shed && s.On:
			state = "detail and call probes detached (cold tier kept)"
		case s.Shed:
			state = "detail and call probes may come back"
		case s.On:
			state = "probes detached"
		}
		_, err := fmt.Fprintf(l.W, "storm guard: %s for pid %d: %s\n", state, s.PID, s.Reason)
		return err
	case l.Details:
		state := "off"
		if s.On {
			state = "on"
		}
		_, err := fmt.Fprintf(l.W, "detail probes %s for pid %d: %s\n", state, s.PID, s.Reason)
		return err
	}
	return nil
}

// LogSwitches logs each switch (the node agent).
type LogSwitches struct {
	Nop
	Log *slog.Logger
}

func (l LogSwitches) Switch(s Switch) error {
	if s.Storm {
		l.Log.Warn("storm guard", "pid", s.PID, "probes_detached", s.On, "shed_only", s.Shed, "reason", s.Reason)
	} else {
		l.Log.Info("detail probes switched", "pid", s.PID, "on", s.On, "reason", s.Reason)
	}
	return nil
}

// ExportLosses makes m export what the pipeline's collectors lost (ring
// buffers full, BPF runs the kernel skipped) and the storm guard's
// counters, read at each scrape.
func (p *Pipeline) ExportLosses(m *export.Metrics) {
	m.LostEvents("tcp", func() (uint64, error) {
		s, err := p.tcp.Stats()
		return s.Lost, err
	})
	m.LostEvents("go", func() (uint64, error) {
		s, err := p.goN.Stats()
		return s.Dropped, err
	})
	m.MissedRuns("tcp", func() (uint64, error) {
		s, err := p.tcp.Stats()
		return s.Missed, err
	})
	m.MissedRuns("go", func() (uint64, error) {
		s, err := p.goN.Stats()
		return s.Missed, err
	})
	m.SocketTable("full", func() (uint64, error) {
		s, err := p.tcp.Stats()
		return s.SocksFull, err
	})
	m.SocketTable("stale", func() (uint64, error) {
		s, err := p.tcp.Stats()
		return s.SocksStale, err
	})
	m.WatchStorm(func() export.StormStats {
		s := p.StormStats()
		return export.StormStats{Trips: s.Trips, DetachedSeconds: s.Detached.Seconds(), UnseenEstimate: s.UnseenEstimate, Sheds: s.Sheds}
	})
}
