package correlate

import (
	"github.com/timeout-tracer/tracer/event"
)

// Output receives what a Stream produces, in event-time order. Each
// method may be nil-safe no-op in an implementation; an error stops the
// stream's current call and is returned by it.
type Output interface {
	// Kernel gets every kernel TCP event (activity samples included) of
	// the processes StreamConfig.Keep keeps, or of every process with
	// StreamConfig.KernelAll: what the TCP metrics count.
	Kernel(*event.TCP) error
	// Event gets every event the join sees (after StreamConfig.Keep),
	// calls and marks included: what a recording holds.
	Event(event.Any) error
	// Report gets every correlated report.
	Report(*Report) error
	// Audit gets every audit line.
	Audit(*AuditLine) error
}

// StreamConfig says what a Stream joins.
type StreamConfig struct {
	Correlator Config
	// Audit, if set, makes audit lines (deadline_missing, hung_call).
	Audit *AuditConfig
	// Keep, if set, says whose events the join sees: the node agent's
	// kernel collector sees every process, the reports concern the traced
	// ones (and sockets of no known owner, pid 0, which are always kept).
	// It is asked with the event's time: the stream runs behind the
	// kernel (the merge waits for every source), and whether a process was
	// traced is a question about that time, not about now (a one-shot
	// program's SYN retry, pushed after its exit had detached it, was
	// dropped).
	Keep func(pid uint32, mono uint64) bool
	// KernelAll hands Output.Kernel every kernel TCP event, Keep or not
	// (the node-wide TCP metrics, an opt-in); otherwise it gets the events
	// Keep keeps.
	KernelAll bool
}

// Stream is everything after the merge of the ring buffers, in one pure,
// replayable piece: the correlator, the audit and their socket tables, fed
// a time-ordered stream (Push) and told when time passes with no event
// (Advance). The live pipeline and `tracer replay` drive the same Stream,
// so a replay of a recording prints what the live run printed.
type Stream struct {
	cfg   StreamConfig
	corr  *Correlator
	audit *Audit
	out   Output
	now   uint64
}

// NewStream returns a Stream writing to out.
func NewStream(cfg StreamConfig, out Output) (*Stream, error) {
	corr, err := New(cfg.Correlator)
	if err != nil {
		return nil, err
	}
	s := &Stream{cfg: cfg, corr: corr, out: out}
	if cfg.Audit != nil {
		s.audit = NewAudit(*cfg.Audit)
	}
	return s, nil
}

// Correlator is the stream's correlator, for its counters and for telling
// it which processes are watched (WatchActivity, WatchLocal).
func (s *Stream) Correlator() *Correlator { return s.corr }

// Audit is the stream's audit, nil when off.
func (s *Stream) Audit() *Audit { return s.audit }

// Now is the stream's time: the latest event or Advance.
func (s *Stream) Now() uint64 { return s.now }

// Push applies one event of the time-ordered stream.
func (s *Stream) Push(ev event.Any) error {
	s.now = max(s.now, ev.MonoTime())
	if t, ok := ev.(*event.TCP); ok {
		kept := s.cfg.Keep == nil || t.PID == 0 || s.cfg.Keep(t.PID, t.Mono)
		if kept || s.cfg.KernelAll {
			if err := s.out.Kernel(t); err != nil {
				return err
			}
		}
		if !kept {
			// Not a traced process: only the audit's peer table learns
			// from it (a traced process's call may use that connection).
			return s.auditLines(auditPush(s.audit, ev))
		}
	}
	if err := s.out.Event(ev); err != nil {
		return err
	}
	if err := s.auditLines(auditPush(s.audit, ev)); err != nil {
		return err
	}
	if m, ok := ev.(*event.Mark); ok {
		return s.reports(s.corr.Advance(m.Mono))
	}
	if _, ok := ev.(*event.Call); ok {
		return s.reports(s.corr.Advance(ev.MonoTime()))
	}
	return s.reports(s.corr.Push(ev))
}

// StateAtAttach hands the correlator a connection's state read at its
// process's attach (Correlator.StateAtAttach), and the outputs the record
// as they would a kernel event (marked at_attach): a recording replays it.
func (s *Stream) StateAtAttach(e *event.TCP) error {
	if !e.AtAttach {
		return nil
	}
	if err := s.out.Kernel(e); err != nil {
		return err
	}
	if err := s.out.Event(e); err != nil {
		return err
	}
	s.corr.StateAtAttach(e)
	return nil
}

// Advance tells the stream that no event before t is to come.
func (s *Stream) Advance(t uint64) error {
	s.now = max(s.now, t)
	if err := s.auditLines(auditAdvance(s.audit, t)); err != nil {
		return err
	}
	return s.reports(s.corr.Advance(t))
}

// Waiting reports whether time passing alone can produce output: a report
// in its grace window or an audit line due.
func (s *Stream) Waiting() bool {
	return s.corr.Waiting() > 0 || (s.audit != nil && s.audit.Waiting())
}

// NextDue is the stream time at which time passing alone next produces a
// report (an audit line may come earlier: Waiting says whether one can);
// false when no report waits. The live pipeline asks its sources for their
// progress then, so that a report leaves as soon as its grace window ends.
func (s *Stream) NextDue() (uint64, bool) { return s.corr.NextDue() }

// Flush ends the stream: every pending report and audit line is said.
func (s *Stream) Flush() error {
	if err := s.auditLines(auditFlush(s.audit)); err != nil {
		return err
	}
	return s.reports(s.corr.Flush())
}

func (s *Stream) reports(rs []Report) error {
	for i := range rs {
		if err := s.out.Report(&rs[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Stream) auditLines(ls []AuditLine) error {
	for i := range ls {
		if err := s.out.Audit(&ls[i]); err != nil {
			return err
		}
	}
	return nil
}

// nil-safe forms for a Stream without audit.

func auditPush(a *Audit, ev event.Any) []AuditLine {
	if a == nil {
		return nil
	}
	return a.Push(ev)
}

func auditAdvance(a *Audit, t uint64) []AuditLine {
	if a == nil {
		return nil
	}
	return a.Advance(t)
}

func auditFlush(a *Audit) []AuditLine {
	if a == nil {
		return nil
	}
	return a.Flush()
}
