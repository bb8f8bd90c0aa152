package correlate

import (
	"fmt"
	"strings"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// Local causes: time the process lost to CPU throttling, run-queue waits
// and GC pauses during a context's life, and when they name the class.
//
// The window is the context's life, [creation, expiry], when the detail
// probes saw the creation; else the LocalLookback (1 s) before the expiry,
// and the report says it is approximate. Shares are taken of the window's
// length: the life, not the budget, since a CPU-starved process fires its
// timer late and its life outlasts the budget.
//
// The rule, applied after the network verdict:
//
//  1. rto, syn_timeout, reset and refused stay, whatever the local
//     figures: unacknowledged data, an unanswered handshake or a refused or
//     reset connection stop a request however much CPU it had. The local
//     figures are still reported, and the note says they were large.
//  2. Otherwise, when the largest local figure is at least LocalShare
//     (30 %) of the window (the run-queue figure less the throttled time,
//     which a throttled thread also spends runnable but not running), its kind names the class (cpu_throttled,
//     runqueue_delay, gc_pause) and replaces zero_window, fast_retransmit,
//     tlp, slow_peer, local or unknown: mild network trouble is repaired
//     within a few round trips, and a peer that looks slow, or a wait that
//     looks local, is just as well explained by a process that could not
//     run for a third of its life. The network verdict is kept in the
//     note and the connections stay listed. slow_peer asks more: the
//     local figure must reach LocalOverPeer (half) of the life, or the
//     context's timer must have fired late by that much (a runtime that
//     cannot run its timer cannot read an answer either). tlp and
//     fast_retransmit ask less: a third of LocalShare, when the local
//     figure is also larger than the retransmits could cost (mildCost).
//  3. Otherwise the network verdict stands.
//
// GC pauses inside throttled time are the throttling's when the figures
// are compared (gcThrottled).
//
// Figures: throttled time is the growth of the cgroup's throttled_usec
// between samples, spread evenly over the sample interval; run-queue time
// is the mean wait of a thread that wanted a CPU, per accumulation
// interval, spread likewise; GC pauses are exact intervals. Only the part
// of an interval inside the window counts.

// localIv is one interval of local time lost.
type localIv struct {
	start, end uint64
	lost       uint64 // ns
}

func (c *Correlator) onLocal(l *event.Local) {
	if !l.Kind.Valid() || l.Start > l.Mono || l.Lost < 0 {
		c.stats.LocalInvalid++
		return
	}
	p := c.procFor(l.PID, l.Mono)
	if p == nil {
		return
	}
	p.lastSeen = max(p.lastSeen, l.Mono)
	k := int(l.Kind) - 1
	if !p.hasLocal[k] || l.Start < p.localSince[k] {
		p.hasLocal[k], p.localSince[k] = true, l.Start
	}
	p.localLast[k] = max(p.localLast[k], l.Mono)
	if l.Lost == 0 {
		// Nothing lost: it only says the source is watching.
		return
	}
	if p.local[k].push(localIv{start: l.Start, end: l.Mono, lost: uint64(l.Lost)}, c.cfg.MaxLocalPerProcess) {
		c.stats.LocalEvicted++
	}
}

// WatchLocal declares that a local source of kind k watches pid from mono
// on, so that a report with nothing lost says 0 rather than null.
func (c *Correlator) WatchLocal(pid uint32, k event.LocalKind, mono uint64) {
	if !k.Valid() {
		return
	}
	p := c.procFor(pid, mono)
	if p == nil {
		return
	}
	i := int(k) - 1
	if !p.hasLocal[i] || mono < p.localSince[i] {
		p.hasLocal[i], p.localSince[i] = true, mono
	}
	p.localLast[i] = max(p.localLast[i], mono)
}

// lostIn sums the time lost in [lo, hi] from a ring in stream order.
func lostIn(r *ring[localIv], lo, hi uint64) uint64 {
	var sum float64
	for i := r.len() - 1; i >= 0; i-- {
		iv := r.at(i)
		if iv.end < lo {
			break // in order of their ends: the rest are older
		}
		if iv.start > hi {
			continue
		}
		if iv.end == iv.start {
			sum += float64(iv.lost)
			continue
		}
		a, b := max(iv.start, lo), min(iv.end, hi)
		if b > a {
			sum += float64(iv.lost) * float64(b-a) / float64(iv.end-iv.start)
		}
	}
	return uint64(sum)
}

// gcThrottled is the throttled time inside the GC pauses of [lo, hi]: a
// stop of the world waits for every thread, and a throttled cgroup's
// threads do not run, so a pause overlapping throttled time was stretched
// by the throttling (a CPU-quota client: 10 of 295 throttled timeouts read
// gc_pause). The throttled time of each sample is spread evenly over it,
// as lostIn does.
func gcThrottled(p *proc, lo, hi uint64) uint64 {
	var sum uint64
	r := &p.local[int(event.LocalGCPause)-1]
	for i := r.len() - 1; i >= 0; i-- {
		iv := r.at(i)
		if iv.end < lo {
			break
		}
		a, b := max(iv.start, lo), min(iv.end, hi)
		if b > a {
			sum += min(lostIn(&p.local[int(event.LocalThrottled)-1], a, b), b-a)
		}
	}
	return sum
}

// localFigures returns the local time lost in d's window, nil when no
// local source watches the process, and the window's length the rule
// compares with.
func (c *Correlator) localFigures(d *event.Deadline) (*LocalTime, [3]uint64, uint64) {
	var lost [3]uint64
	p := c.procs[d.PID]
	lo, hi := subSat(d.Mono, uint64(c.cfg.LocalLookback)), d.Mono
	approximate := true
	if d.Detail && d.CreatedMono != 0 && d.CreatedMono <= d.Mono {
		lo, approximate = d.CreatedMono, false
	}
	// The shares are of the context's whole life, creation to the timer's
	// firing: a CPU-starved process fires its timers late, so the life can
	// be much longer than the budget, and the time lost is taken of it.
	life := hi - lo
	if p == nil || !(p.watched(0, lo, hi) || p.watched(1, lo, hi) || p.watched(2, lo, hi)) {
		return nil, lost, 0
	}
	lt := &LocalTime{WindowMs: msOf(hi - lo), Approximate: approximate}
	for k := range lost {
		// A source that started watching after the window began cannot
		// vouch for all of it, but what it saw counts.
		if !p.watched(k, lo, hi) {
			continue
		}
		lost[k] = min(lostIn(&p.local[k], lo, hi), hi-lo)
		if event.LocalKind(k+1) == event.LocalGCPause && p.watched(0, lo, hi) {
			if lt.gcThrottled = min(gcThrottled(p, lo, hi), lost[k]); lt.gcThrottled > 0 {
				v := msOf(lt.gcThrottled)
				lt.GCPauseThrottledMs = &v
			}
		}
		v := msOf(lost[k])
		switch event.LocalKind(k + 1) {
		case event.LocalThrottled:
			lt.ThrottledMs = &v
		case event.LocalRunqueue:
			lt.RunqueueMs = &v
		case event.LocalGCPause:
			lt.GCPauseMs = &v
		}
	}
	return lt, lost, life
}

// heartbeatGap is how long a sampled source (throttling, run-queue) may
// stay silent while watching: the collectors send an interval at least once
// a second, lost time or not. GC pauses are events: their source watches
// from its first sign on, and silence means no pause.
const heartbeatGap = uint64(1500 * time.Millisecond)

// watched reports whether a source of kind index k watched the process
// during [lo, hi]: it started before hi and, for sampled sources, was heard
// from recently enough before lo or since (the scheduler hooks are
// detached while the process is not timing out).
func (p *proc) watched(k int, lo, hi uint64) bool {
	if !p.hasLocal[k] || p.localSince[k] > hi {
		return false
	}
	if event.LocalKind(k+1) == event.LocalGCPause {
		return true
	}
	return p.localLast[k]+heartbeatGap >= lo
}

var localClasses = [3]Class{ClassCPUThrottled, ClassRunqueueDelay, ClassGCPause}

// applyLocal adds the local figures to cause and, by the rule above, may
// name the class after the largest.
func (c *Correlator) applyLocal(cause *Cause, d *event.Deadline) {
	lt, lost, life := c.localFigures(d)
	if lt == nil {
		return
	}
	cause.Local = lt
	// A throttled thread is runnable but not running: throttled time shows
	// in the run-queue figure too. Only the run-queue time beyond it counts
	// against the other kinds.
	cmpLost := lost
	if lt.ThrottledMs != nil {
		cmpLost[1] = subSat(lost[1], lost[0])
		// GC pauses stretched by the throttling are the throttling's.
		cmpLost[2] = subSat(lost[2], lt.gcThrottled)
	}
	best := 0
	for k := range cmpLost {
		if cmpLost[k] > cmpLost[best] {
			best = k
		}
	}
	lost = cmpLost
	need := c.cfg.LocalShare
	if cost, ok := mildCost(cause); ok && lost[best] > cost {
		// Tail loss probes and fast retransmits cost the request a few
		// round trips each (else an RTO fires: class rto). Local time
		// beyond that explains more of the life than they can: a third of
		// the usual share names the class (a CPU-quota client: 6 of 295
		// throttled timeouts read tlp, from one probe on a healthy
		// connection, with 155 ms throttled).
		need /= 3
	}
	if heldLocal(cause) {
		// The answer arrived in time and waited unread: the process lost
		// the time, and the largest local figure says to what, at the
		// same third of the share.
		need = c.cfg.LocalShare / 3
	}
	if life == 0 || lost[best] == 0 || float64(lost[best]) < need*float64(life) {
		return
	}
	share := float64(lost[best]) / float64(life)
	what := localWhat(best, lost[best], share, life, lt.Approximate)
	switch cause.Class {
	case ClassRTO, ClassSynTimeout, ClassReset, ClassRefused:
		cause.Note = joinNote(cause.Note, fmt.Sprintf("%s as well; the class stays %s: the network failure stops a request whatever the CPU did", what, cause.Class))
		return
	case ClassSlowPeer, ClassSlowClient:
		// The peer was silent from the request to the expiry: that explains
		// the expiry unless the process lost most of the life itself (a
		// starved client looks like a silent peer when it cannot read the
		// answer in time).
		//
		// Or unless the timer itself fired late by more than that share of
		// the life: the runtime could not run the timer, so it could not
		// have read an answer either, and the peer's silence after the
		// budget is the process's own. (A starved client's run-queue figure,
		// a mean over its threads, can stay under half the life while its
		// timers fire at several times their budget: seen with a client at
		// nice 15 beside two CPU hogs, 30 ms budgets firing after 230 ms.)
		late, ok := timerLate(d)
		if share < c.cfg.LocalOverPeer && !(ok && float64(late) >= c.cfg.LocalOverPeer*float64(life)) {
			cause.Note = joinNote(cause.Note, fmt.Sprintf("%s as well; the class stays %s: the process lost less than %.0f %% of the life", what, cause.Class, c.cfg.LocalOverPeer*100))
			return
		}
		if share < c.cfg.LocalOverPeer {
			what += fmt.Sprintf("; its timer fired %s after the %s budget ran out", fmtDur(late), fmtDur(life-late))
		}
	}
	prev := cause.Class
	cause.Class = localClasses[best]
	if cause.Confidence == None || cause.Confidence == Ambiguous {
		cause.Confidence = Probable
	}
	was := fmt.Sprintf("without the local figures the verdict was %s (%s)", prev, cause.Summary)
	cause.Summary = what
	cause.Note = joinNote(cause.Note, was)
}

// mildCost bounds what the mild trouble of a tlp or fast_retransmit
// verdict could have cost the request. A tail loss probe fires about two
// round trips after the segment it repeats, a fast retransmit after three
// duplicate ACKs, and either repairs the loss one round trip later; one
// that is not answered ends in an RTO, which the grace window after the
// expiry would show (class rto). So each costs about four smoothed RTTs,
// counted at no less than 20 ms (the probe timer's floor is 10 ms, a
// delayed ACK 40 ms), and no more than the RTO. ok is false for other
// classes.
func mildCost(cause *Cause) (cost uint64, ok bool) {
	if cause.Class != ClassTLP && cause.Class != ClassFastRetransmit {
		return 0, false
	}
	for _, cn := range cause.Connections {
		if cn.AtExpiry != nil && cn.AtExpiry.Recovering {
			// Still in loss recovery at the expiry: not a few round
			// trips, the loss held the request up to the end.
			return 0, false
		}
		n := cn.Counts[event.TCPTLP.String()] + cn.Counts[event.TCPFastRetransmit.String()] + cn.Counts[event.TCPRetransmit.String()]
		each := max(4*time.Duration(cn.SRTTUs)*time.Microsecond, 20*time.Millisecond)
		if cn.RTOMs > 0 {
			each = min(each, time.Duration(cn.RTOMs)*time.Millisecond)
		}
		cost += uint64(n) * uint64(each)
	}
	return cost, true
}

// timerLate is how long after its deadline d's timer fired, when the
// creation was seen (the life then runs from creation to the firing).
func timerLate(d *event.Deadline) (uint64, bool) {
	b, ok := d.Budget()
	if !ok || b < 0 || d.CreatedMono == 0 || d.CreatedMono > d.Mono {
		return 0, false
	}
	return subSat(d.Mono-d.CreatedMono, uint64(b)), true
}

func localWhat(k int, lost uint64, share float64, life uint64, approx bool) string {
	of := "of the context's " + fmtDur(life) + " life"
	if approx {
		of = "of the " + fmtDur(life) + " before the expiry (creation not seen)"
	}
	var verb string
	switch event.LocalKind(k + 1) {
	case event.LocalThrottled:
		verb = "the process's cgroup was CPU-throttled for"
	case event.LocalRunqueue:
		verb = "the process's threads waited for a CPU for"
	case event.LocalGCPause:
		verb = "the Go GC stopped the world for"
	}
	return fmt.Sprintf("%s %s (%.0f %% %s)", verb, fmtDur(lost), share*100, of)
}

func joinNote(note, more string) string {
	if note == "" {
		return more
	}
	return strings.Join([]string{note, more}, "; ")
}

func msOf(ns uint64) float64 {
	return float64(ns/1000) / 1000
}
