package correlate

import (
	"cmp"
	"slices"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// AuditConfig says which audit lines to make.
type AuditConfig struct {
	// Missing reports each outbound call made under a context with no
	// deadline at all.
	Missing bool
	// Hung reports, once, each net/http call without a deadline still
	// waiting HangAfter after it started. 0 means 10 s.
	Hung      bool
	HangAfter time.Duration
	// PeerWait is how long a deadline_missing line waits for its
	// connection's peer when the kernel has not named it yet: a connection
	// opened before the tracer is learnt from its first send, which comes
	// just after the call's probe (seen: a gRPC client's first call
	// reported with no target, under load). 0 means 300 ms.
	PeerWait time.Duration
}

// AuditKind is the kind of an audit line.
type AuditKind uint8

// The audit's kinds of line.
const (
	AuditMissing AuditKind = iota + 1 // deadline_missing
	AuditHung                         // hung_call
)

// AuditLine is one finding of the audit.
type AuditLine struct {
	Kind AuditKind
	Call event.Call
	// Peer is the call's connection's peer address, "" when the kernel
	// never named it.
	Peer string
	// Waiting (hung calls) is how long the call had waited: HangAfter,
	// in event time, whenever the stream is cut.
	Waiting time.Duration
	// Conn (hung calls) is the last kernel event of the call's connection,
	// nil when none was seen.
	Conn *event.TCP
}

// Time is when the line's finding became true: the call, or the moment
// it had waited HangAfter.
func (l *AuditLine) Time() time.Time {
	if l.Kind == AuditHung {
		return l.Call.Time.Add(l.Waiting)
	}
	return l.Call.Time
}

// Audit finds the outbound calls made with no deadline and the ones that
// hang, from the same time-ordered stream the Correlator reads and in event
// time only: a replay of a recording gives the lines the live run gave.
// It keeps the peer and last kernel event of every connection it saw.
type Audit struct {
	cfg     AuditConfig
	now     uint64
	peers   map[uint64]string
	lastTCP map[uint64]event.TCP
	// missing are the calls without a deadline waiting for their peer.
	missing []event.Call
	// open are the calls without a deadline in flight, by goroutine.
	open  map[callKey]*openCall
	out   []AuditLine
	stats AuditStats
}

// AuditStats are the audit's counters.
type AuditStats struct {
	Calls, Missing, Hung uint64
	// Restarts counts the times a table hit its cap and was cleared
	// (peers: connections; open: calls in flight): said, never silent.
	PeerRestarts, OpenRestarts uint64
}

type callKey struct {
	pid  uint32
	goid uint64
}

type openCall struct {
	call     event.Call
	reported bool
}

// The tables' caps: a connection table cleared when full, and the calls
// without a deadline tracked for hung_call.
const (
	maxAuditPeers = 65536
	maxOpenCalls  = 65536
)

// NewAudit returns an Audit; zero durations take their defaults.
func NewAudit(cfg AuditConfig) *Audit {
	if cfg.HangAfter <= 0 {
		cfg.HangAfter = 10 * time.Second
	}
	if cfg.PeerWait <= 0 {
		cfg.PeerWait = 300 * time.Millisecond
	}
	return &Audit{cfg: cfg, peers: make(map[uint64]string), lastTCP: make(map[uint64]event.TCP), open: make(map[callKey]*openCall)}
}

// Push applies one event and returns the lines that became due before it.
// The returned slice is reused by the next call.
func (a *Audit) Push(ev event.Any) []AuditLine {
	a.out = a.out[:0]
	a.advance(ev.MonoTime())
	switch e := ev.(type) {
	case *event.TCP:
		a.notePeer(e)
	case *event.Call:
		a.onCall(e)
	}
	// A call whose peer is known, or just became known, is said at once.
	a.releaseMissing()
	return a.out
}

// Advance tells the audit that the stream has no events before mono and
// returns the lines that became due. The returned slice is reused.
func (a *Audit) Advance(mono uint64) []AuditLine {
	a.out = a.out[:0]
	a.advance(mono)
	return a.out
}

// Flush says the calls still waiting for their peer, at the end of the
// stream. The returned slice is reused.
func (a *Audit) Flush() []AuditLine {
	a.out = a.out[:0]
	for i := range a.missing {
		a.emitMissing(&a.missing[i])
	}
	a.missing = a.missing[:0]
	return a.out
}

// Waiting reports whether a line waits for its connection's peer, due
// within PeerWait. Calls in flight that may yet hang are not counted: a
// long-lived call must not keep the live pipeline ticking fast; its
// hung_call comes at the next Advance after HangAfter.
func (a *Audit) Waiting() bool { return len(a.missing) > 0 }

// Stats returns the counters.
func (a *Audit) Stats() AuditStats { return a.stats }

// Peer returns the peer the kernel named for a connection, "" if none.
func (a *Audit) Peer(cookie uint64) string { return a.peers[cookie] }

func (a *Audit) advance(t uint64) {
	if t < a.now {
		return // out of order: time never goes back
	}
	a.now = t
	a.releaseMissing()
	a.reportHung()
}

func (a *Audit) notePeer(ev *event.TCP) {
	if ev.Cookie == 0 || !ev.Peer.IsValid() || ev.Peer.Port() == 0 {
		return
	}
	if len(a.peers) >= maxAuditPeers {
		clear(a.peers)
		clear(a.lastTCP)
		a.stats.PeerRestarts++
	}
	a.peers[ev.Cookie] = ev.Peer.String()
	if !ev.Kind.Lifecycle() {
		a.lastTCP[ev.Cookie] = *ev
	}
}

func (a *Audit) onCall(c *event.Call) {
	k := callKey{c.PID, c.Goid}
	if c.End {
		delete(a.open, k)
		return
	}
	a.stats.Calls++
	if c.HasDeadline {
		return
	}
	if a.cfg.Missing {
		a.missing = append(a.missing, *c)
	}
	if !a.cfg.Hung || c.Kind != "http" {
		return // only net/http calls have an end probe: a gRPC stream may live long
	}
	if len(a.open) >= maxOpenCalls {
		clear(a.open)
		a.stats.OpenRestarts++
	}
	a.open[k] = &openCall{call: *c}
}

// releaseMissing says the calls without a deadline, in stream order, once
// their connection's peer is known or PeerWait has passed.
func (a *Audit) releaseMissing() {
	n := 0
	for ; n < len(a.missing); n++ {
		c := &a.missing[n]
		if _, known := a.peers[c.Cookie]; !known && c.Cookie != 0 && a.now-c.Mono < uint64(a.cfg.PeerWait) {
			break // in order: the later ones wait with it
		}
		a.emitMissing(c)
	}
	a.missing = append(a.missing[:0], a.missing[n:]...)
}

func (a *Audit) emitMissing(c *event.Call) {
	a.stats.Missing++
	a.out = append(a.out, AuditLine{Kind: AuditMissing, Call: *c, Peer: a.peers[c.Cookie]})
}

// reportHung says, once per call and in the order the calls started,
// which calls without a deadline have waited HangAfter.
func (a *Audit) reportHung() {
	if !a.cfg.Hung {
		return
	}
	hang := uint64(a.cfg.HangAfter)
	start := len(a.out)
	for _, oc := range a.open {
		if oc.reported || a.now-oc.call.Mono < hang {
			continue
		}
		oc.reported = true
		a.stats.Hung++
		l := AuditLine{Kind: AuditHung, Call: oc.call, Peer: a.peers[oc.call.Cookie], Waiting: a.cfg.HangAfter}
		if t, ok := a.lastTCP[oc.call.Cookie]; ok {
			l.Conn = &t
		}
		a.out = append(a.out, l)
	}
	slices.SortFunc(a.out[start:], func(x, y AuditLine) int {
		return cmp.Or(cmp.Compare(x.Call.Mono, y.Call.Mono), cmp.Compare(x.Call.PID, y.Call.PID), cmp.Compare(x.Call.Goid, y.Call.Goid))
	})
}
