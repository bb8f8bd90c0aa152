package correlate

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// peerGroup is what the connections to one peer showed together: a retry
// loop makes many sockets to one peer, and a person wants "3 connects to X
// refused", not three sentences.
type peerGroup struct {
	key   peerKey
	peer  string
	socks int
	n     [32]int
	rtos  []rtoAt
	snap  *tcpRec
	// attach: the group's latest state record read at attach, and how
	// many of its sockets had one.
	attach   *tcpRec
	attached int
	flags    evidence // flags ORed over the group
	// send: a send side read at the expiry in loss recovery, of one of the
	// group's connections (evidence.send), nil when none was.
	send *event.SendState
	// synRetried: one of the group's connections was still sending its
	// SYN at the expiry, retransmitted (event.SendState.SynRetried).
	synRetried bool
}

// peerKey groups by peer address; sockets whose peer is unknown stay apart.
type peerKey struct {
	peer   netip.AddrPort
	cookie uint64
}

func keyOf(e *evidence) peerKey {
	if peer := e.addr().peer; peer.IsValid() {
		return peerKey{peer: peer}
	}
	return peerKey{cookie: e.cookie}
}

// maxPhrases bounds a summary: it is one sentence, the connection list
// has the rest.
const maxPhrases = 3

func groupByPeer(es []*evidence) []*peerGroup {
	var gs []*peerGroup
	index := make(map[peerKey]int, len(es))
	for _, e := range es {
		k := keyOf(e)
		i, ok := index[k]
		if !ok {
			i = len(gs)
			index[k] = i
			gs = append(gs, &peerGroup{key: k})
		}
		g := gs[i]
		g.socks++
		for k, v := range e.n {
			g.n[k] += v
		}
		g.rtos = append(g.rtos, e.rtos...)
		if e.snap != nil && (g.snap == nil || e.snap.mono > g.snap.mono) {
			g.snap = e.snap
		}
		if e.attach != nil {
			g.attached++
			if g.attach == nil || e.attach.mono > g.attach.mono {
				g.attach = e.attach
			}
		}
		if g.send == nil && e.send.Recovering() {
			g.send = e.send
		}
		g.synRetried = g.synRetried || e.send.SynRetried()
		f := &g.flags
		f.resetEst, f.errReset, f.resetSyn, f.errRefused = f.resetEst || e.resetEst, f.errReset || e.errReset, f.resetSyn || e.resetSyn, f.errRefused || e.errRefused
		f.connTimedOut, f.errSynTimed, f.abortedRetry = f.connTimedOut || e.connTimedOut, f.errSynTimed || e.errSynTimed, f.abortedRetry || e.abortedRetry
		if f.connRejected == 0 {
			f.connRejected = e.connRejected
		}
	}
	for _, g := range gs {
		g.peer = peerName(g.key.peer, g.key.cookie)
		slices.SortStableFunc(g.rtos, func(a, b rtoAt) int { return cmp.Compare(a.mono, b.mono) })
	}
	return gs
}

// summarize writes the one sentence of a report from the candidates that
// show class (all of them for slow_peer and unknown).
func summarize(class Class, cands []*evidence, w Window) string {
	if class == ClassUnknown {
		var whys []string
		for _, e := range cands {
			if e.why != "" && !slices.Contains(whys, e.why) {
				whys = append(whys, e.why)
			}
		}
		if len(whys) == 0 {
			return "no cause could be established"
		}
		return strings.Join(whys, "; ")
	}
	var show []*evidence
	for _, e := range cands {
		if e.class == class {
			show = append(show, e)
		}
	}
	gs := groupByPeer(show)
	var parts []string
	for _, g := range gs[:min(len(gs), maxPhrases)] {
		parts = append(parts, g.phrase(class, w))
	}
	if more := len(gs) - maxPhrases; more > 0 {
		parts = append(parts, "and the same with "+plural(more, "more peer", "more peers"))
	}
	return strings.Join(parts, "; ")
}

// disagreement lists what candidates that disagree show, briefly.
func disagreement(cands []*evidence) string {
	var parts []string
	for _, e := range cands[:min(len(cands), maxPhrases+1)] {
		parts = append(parts, fmt.Sprintf("%s to %s", describe(e.class), e.peerName()))
	}
	s := strings.Join(parts, ", ")
	if more := len(cands) - maxPhrases - 1; more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

func (g *peerGroup) phrase(class Class, w Window) string {
	n, f := &g.n, &g.flags
	switch class {
	case ClassRTO:
		if a := g.attach; a != nil && a.kind == event.TCPRTO {
			// The socket's state at the attach is the evidence: say so,
			// and what the hooks saw since.
			s := fmt.Sprintf("data to %s unacknowledged since before the tracer attached: %s in a row by then, RTO backed off to %d ms (read from the socket at the attach)",
				g.peer, plural(int(a.retransmits), "RTO", "RTOs"), (a.rtoUs+500)/1000)
			if g.socks > 1 {
				s = fmt.Sprintf("%d connections to %s: data unacknowledged since before the tracer attached on %d, the latest with %s in a row by then, RTO backed off to %d ms (read from the sockets at the attach)",
					g.socks, g.peer, g.attached, plural(int(a.retransmits), "RTO", "RTOs"), (a.rtoUs+500)/1000)
			}
			if k := n[event.TCPRTO] - g.attached; k > 0 {
				s += fmt.Sprintf("; %s since", plural(k, "RTO", "RTOs"))
			}
			return s + g.srtt(", ")
		}
		if k := n[event.TCPRTO]; k > 0 {
			return fmt.Sprintf("%s to %s, rto %s ms%s", plural(k, "RTO", "RTOs"), g.peer, rtoSeq(g.rtos), g.srtt(", "))
		}
		if g.send != nil && !f.errTimedOut {
			return fmt.Sprintf("data to %s unacknowledged at the expiry, in loss after a retransmission timeout (%s)", g.peer, recovery(g.send)) + g.srtt(", ")
		}
		return fmt.Sprintf("the connection to %s timed out (ETIMEDOUT) after repeated retransmission timeouts", g.peer)
	case ClassSynTimeout:
		var b strings.Builder
		a := g.attach
		if a != nil && a.kind != event.TCPSynRetransmit {
			a = nil
		}
		switch syn, synack := n[event.TCPSynRetransmit], n[event.TCPSynAckRetransmit]; {
		case a != nil && syn == g.attached && g.socks == 1:
			fmt.Fprintf(&b, "the connect to %s was in SYN retries since before the tracer attached, unanswered (%s by then, read from the socket at the attach)", g.peer, plural(int(a.retransmits), "retry", "retries"))
			a = nil
		case syn > 0 && g.socks > 1:
			fmt.Fprintf(&b, "%d connects to %s unanswered (%s)", g.socks, g.peer, plural(syn, "SYN retransmit", "SYN retransmits"))
		case syn > 0:
			fmt.Fprintf(&b, "%s to %s unanswered", plural(syn, "SYN retransmit", "SYN retransmits"), g.peer)
		case synack > 0:
			fmt.Fprintf(&b, "%s to %s unanswered", plural(synack, "SYN-ACK retransmit", "SYN-ACK retransmits"), g.peer)
		case g.synRetried:
			fmt.Fprintf(&b, "the connect to %s got no answer: still sending its SYN at the expiry, retransmitted (read from the socket then)", g.peer)
		default:
			fmt.Fprintf(&b, "the connect to %s got no answer", g.peer)
		}
		switch {
		case f.connTimedOut || f.errSynTimed:
			b.WriteString(", connect timed out (ETIMEDOUT)")
		case f.abortedRetry:
			b.WriteString(", connect abandoned when the deadline expired")
		}
		if a != nil {
			fmt.Fprintf(&b, "; in SYN retries since before the tracer attached (%s by then, read from the socket at the attach)", plural(int(a.retransmits), "retry", "retries"))
		}
		return b.String()
	case ClassReset:
		what := "reset by the peer"
		if !f.resetEst {
			what = "failed with ECONNRESET"
		}
		if g.socks > 1 {
			return fmt.Sprintf("%d connections to %s %s", g.socks, g.peer, what)
		}
		return fmt.Sprintf("the connection to %s %s", g.peer, what)
	case ClassRefused:
		why := "RST on SYN"
		switch {
		case f.connRejected != 0:
			why = errnoName(f.connRejected)
		case f.errRefused:
			why = "ECONNREFUSED"
		}
		return fmt.Sprintf("%s to %s refused (%s)", plural(g.socks, "connect", "connects"), g.peer, why)
	case ClassZeroWindow:
		if a := g.attach; a != nil && a.kind == event.TCPZeroWindow && n[event.TCPZeroWindow] == g.attached {
			return fmt.Sprintf("%s kept its receive window closed since before the tracer attached (zero-window probes backed off %d times by then, read from the socket at the attach)", g.peer, a.backoff)
		}
		return fmt.Sprintf("%s kept its receive window closed (%s)", g.peer, plural(n[event.TCPZeroWindow], "zero-window probe", "zero-window probes"))
	case ClassFastRetransmit:
		s := fmt.Sprintf("%s to %s", plural(n[event.TCPFastRetransmit], "fast retransmit", "fast retransmits"), g.peer)
		if k := n[event.TCPRetransmit]; k > 0 {
			s = fmt.Sprintf("%s and %s to %s", plural(n[event.TCPFastRetransmit], "fast retransmit", "fast retransmits"), plural(k, "other retransmit", "other retransmits"), g.peer)
		}
		if g.send != nil {
			if n[event.TCPFastRetransmit]+n[event.TCPRetransmit] == 0 {
				s = "data to " + g.peer
			}
			s += fmt.Sprintf(", still in loss recovery at the expiry (%s)", recovery(g.send))
		}
		return s + g.srtt(", ")
	case ClassTLP:
		return fmt.Sprintf("%s to %s%s", plural(n[event.TCPTLP], "tail loss probe", "tail loss probes"), g.peer, g.srtt(", "))
	case ClassSlowPeer:
		health := "no retransmits"
		if k := n[event.TCPTLP] + n[event.TCPFastRetransmit] + n[event.TCPRetransmit]; k > 0 {
			// Mild trouble repaired long enough before the expiry
			// (repairedBefore).
			health = plural(k, "retransmit", "retransmits") + ", repaired before the expiry"
		}
		if s := g.srtt(""); s != "" {
			health = s + ", " + health
		}
		return fmt.Sprintf("%s did not answer %s on a healthy connection (%s)", g.peer, within(w), health)
	}
	return string(class)
}

// recovery describes a send side in loss recovery, read at the expiry.
func recovery(s *event.SendState) string {
	return fmt.Sprintf("%d bytes unacknowledged, %s retransmitted and not yet acknowledged, %d held lost",
		s.Unacked, plural(int(s.RetransOut), "segment", "segments"), s.LostOut)
}

// srtt returns "<prefix>srtt 0.1 ms", or "" when no snapshot was seen.
func (g *peerGroup) srtt(prefix string) string {
	if g.snap == nil || g.snap.srttUs == 0 {
		return ""
	}
	return prefix + "srtt " + fmtMs(float64(g.snap.srttUs)/1000)
}

// rtoSeq lists the RTO values as they doubled: "204→408→816".
func rtoSeq(rs []rtoAt) string {
	var b strings.Builder
	last := int64(-1)
	for _, r := range rs {
		if r.rtoMs == last {
			continue
		}
		if last >= 0 {
			b.WriteString("→")
		}
		b.WriteString(strconv.FormatInt(r.rtoMs, 10))
		last = r.rtoMs
	}
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// fmtMs writes milliseconds with one decimal below 10 ms, none above.
func fmtMs(ms float64) string {
	if ms < 10 {
		return strconv.FormatFloat(ms, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
}

// fmtDur writes a duration in ns for people: "0.4 ms", "300 ms", "12.5 s".
func fmtDur(ns uint64) string {
	d := time.Duration(ns)
	if d < 10*time.Second {
		return fmtMs(float64(d) / float64(time.Millisecond))
	}
	return strconv.FormatFloat(math.Round(d.Seconds()*10)/10, 'f', -1, 64) + " s"
}

func within(w Window) string {
	if w.Approximate {
		return "before the deadline"
	}
	return "within " + fmtDur(w.End-w.Start)
}

func during(w Window) string {
	switch {
	case w.Approximate:
		return "in the " + fmtDur(w.End-w.Start) + " before the expiry"
	case w.End-w.Start < uint64(time.Millisecond):
		return "around the context's creation"
	}
	return "during the context's " + fmtDur(w.End-w.Start)
}
