package correlate

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// The rules, in the order evaluate applies them:
//
//  1. Exact. When the deadline's creating goroutine is known (detail
//     probes) and was bound to sockets in the window — by its own I/O
//     (kernel_g, activity samples naming it) or by an outbound-call probe
//     (http_roundtrip, grpc_stream, dial) — those sockets are the
//     candidates, confidence exact, and nothing else of the process is
//     looked at. This is the mixed-run guard: a request waiting on a
//     healthy connection to a slow backend is slow_peer even while another
//     connection of the same process retransmits.
//  2. Covered but unbound. When the goroutine is known, had no binding,
//     and the outbound-call probes were demonstrably on for the process
//     (they bound other goroutines around the window), the request made no
//     call: class local, confidence probable. Falling through to the
//     process-wide guess here would blame whatever the other requests'
//     connections suffered. (A request that hands its calls to goroutines
//     of its own is misread as local here: bindings name the goroutine
//     that made the call, and goroutine ancestry is not tracked yet.)
//  3. Process-wide. Otherwise the candidates are the process's sockets with
//     activity or TCP events in the window: one gives confidence probable,
//     several ambiguous — and then the class is what all of them show, or
//     unknown; a network cause is never taken from one candidate among
//     healthy ones. A single candidate is still a guess: a lock wait in a
//     process whose one busy connection is lossy gets that connection's
//     class, which is what "probable" warns about.
//  4. None. No candidate: local (confidence probable) when activity is
//     known for the process, so that its absence means no network I/O;
//     else unknown, saying why.
//
// A connection's class comes only from its own events in the window,
// most specific first (see Class). A connection without trouble is
// slow_peer (request sent, no answer in time) — but only when the kernel
// side was watching at all; else unknown.

// procStartExpiries is how many of a process's first expiries may take
// their budget's bound from its start (budget_from process_start): a
// one-shot program meets one or two (a call's deadline and its dial's).
const procStartExpiries = 3

// evaluate decides one deadline's report from the state at hand.
func (c *Correlator) evaluate(d *event.Deadline) Report {
	c.evUsed = 0
	w, sp, winNote := c.window(d)
	cause := Cause{Window: w}
	var notes []string
	if d.Kind == event.ExpiredAtCreation {
		notes = append(notes, "the deadline had already passed when it was set: the budget was spent before this context existed")
	}
	if winNote != "" {
		notes = append(notes, winNote)
	}
	var cands []*evidence
	waitCands, waitNote := c.waitCandidates(d, sp)
	if waitNote != "" {
		notes = append(notes, waitNote)
	}
	// A tail loss probe alone (a delayed ACK on a healthy network fires
	// one; in a lookback window, on a pooled connection, it may be an
	// earlier request's) does not make the binding this request's cause:
	// the other rules, with their guards for it, decide (TestLocalGCPause:
	// 3 ms requests on a healthy network read tlp 4 times of 311).
	// A server waiting to read from its client (slowClient) keeps the
	// binding: its own sends' probe says nothing of what the client sent.
	if n := settledRetransmits(waitCands); n > 0 {
		notes = append(notes, fmt.Sprintf("%s after the expiry not counted: the connection it waited on had everything acknowledged at the expiry, so they repeat what was written after it (the cancellation's close)",
			plural(n, "retransmit", "retransmits")))
	}
	// Unless the probe went unanswered: data still unacknowledged at the
	// expiry, well after the probe, which a peer acknowledges at once
	// (an upstream dropping everything, its RTO not yet due: 1 of 24
	// proxy reports read unknown from the other rules in CI).
	if len(waitCands) > 0 && !slices.ContainsFunc(waitCands, func(e *evidence) bool { return e.class != ClassTLP || e.probeUnanswered(d) }) && !inboundReading(d) {
		notes = append(notes, "the connection it waited on at the expiry showed only a tail loss probe: the other rules decide")
		waitCands = nil
	}
	switch {
	case len(waitCands) > 0:
		cands = waitCands
		c.decideExact(&cause, cands, d)
		cause.Note = fmt.Sprintf("bound at the expiry: %s of pid %d waited on %s (%s)",
			plural(boundWaiters(d), "goroutine", "goroutines"), d.PID, plural(len(cands), "connection", "connections"), waitFrames(d))
	case d.Detail && d.CreatedGoid != 0 && !w.Approximate:
		cands = c.exactCandidates(d, sp)
		if len(cands) > 0 {
			c.decideExact(&cause, cands, d)
			callersOnly(&cause, cands, d)
			break
		}
		// A goroutine evicted from the tables lost its bindings: its
		// absence then proves nothing.
		// So did one whose busy history pushed bindings of the window
		// out (a goroutine making call after call, evaluated a grace
		// window later).
		lostBindings := (c.gorEvicted && c.lastGorEviction >= sp.lo) || c.bindingsEvictedSince(gkey{d.PID, d.CreatedGoid}, sp.lo)
		// The call probes bind a request once it has a connection: a
		// request still dialing has none. A connection attempt of the
		// process in the window may be this request's, so the absence of
		// a binding proves nothing then (the SYNs of an unanswered dial).
		procCands := c.processCandidates(d, sp)
		dialing := dialingIn(procCands)
		if p := c.procs[d.PID]; p != nil && p.hasReq && !lostBindings && !dialing && p.reqFirst <= sp.hi && p.reqLast+uint64(c.cfg.Lookback) >= sp.lo {
			cause.Class, cause.Confidence = ClassLocal, Probable
			cause.Summary = fmt.Sprintf("goroutine %d made no network call %s: it waited on something local (pool, lock, queue)",
				d.CreatedGoid, during(w))
			notes = append(notes, fmt.Sprintf("the call probes bound other goroutines of pid %d to connections (%s) but none to goroutine %d in the window",
				d.PID, plural(int(p.reqBindingCount), "binding", "bindings"), d.CreatedGoid))
			break
		}
		if dialing {
			notes = append(notes, fmt.Sprintf("goroutine %d had no binding in the window while pid %d was establishing connections (dials are not bound): candidates are the process's sockets",
				d.CreatedGoid, d.PID))
		} else {
			notes = append(notes, fmt.Sprintf("goroutine %d had no binding in the window and no call probe was seen for pid %d: candidates are the process's sockets",
				d.CreatedGoid, d.PID))
		}
		cands = procCands
		c.decideProcess(&cause, cands, d, w)
	default:
		cands = c.processCandidates(d, sp)
		c.decideProcess(&cause, cands, d, w)
	}
	c.heldAnswer(&cause, d, cands)
	slowClient(&cause, d, cands)
	dialWaiting(&cause, d)
	if cause.Note != "" {
		notes = append(notes, cause.Note)
	}
	if d.Unwaited() {
		notes = append(notes, "nobody was waiting on the context when its timer fired (no goroutine parked on its Done channel, no child context): it stopped no blocked call, and another deadline of the same call may be the one that did")
	}
	if d.ClientTimer {
		notes = append(notes, "seen as net/http's own Client.Timeout timer fired, with the request still waiting (over a RoundTripper that is not net/http's Transport the client arms a timer beside the context's; the first to fire is reported)")
	}
	if d.DialTimer {
		notes = append(notes, "seen as the dial's socket deadline fired, with the dial still waiting for its handshake (net's connect sets the socket's write deadline to the context's; the first of the two timers to fire is reported)")
	}
	if d.ServerTimer {
		notes = append(notes, "seen as grpc-go's server deadline timer fired, with the handler still waiting (the server arms a timer beside the stream context's for the client's grpc-timeout, and closes the stream when it fires; the first to fire is reported)")
	}
	if d.Cancelled {
		notes = append(notes, "the program had cancelled the context when its timer fired, after the deadline: the call saw the deadline first (a socket deadline set from the context) and returned")
	}
	var listNote string
	cause.Connections, listNote = connections(cands, d, c.cfg.MaxReportConnections, c.cfg.MaxReportEvents)
	if listNote != "" {
		notes = append(notes, listNote)
	}
	cause.Note = strings.Join(notes, "; ")
	checkWaiting(&cause, d)
	c.applyLocal(&cause, d)
	if !d.ProcStart.IsZero() {
		p := c.procFor(d.PID, d.Mono)
		// The process's start bounds the budgets of the deadlines it set
		// as it started: a one-shot program's one or two. A server's are
		// set as its requests come, and a long-lived client's later
		// expiries come from deadlines set long after its start: bounds
		// too loose to say.
		if gap := p.started.Sub(d.ProcStart); gap < -time.Millisecond || gap > time.Millisecond {
			// Another process's than the expiries counted (a pid
			// reused; the start is read on the monotonic clock and
			// put on the wall clock per event: a millisecond apart
			// at most for one process): count afresh. Its accepted
			// connections, if the earlier one's, only take a bound
			// away.
			p.started, p.expiries = d.ProcStart, 0
		}
		p.expiries++
		if p.accepted || p.expiries > procStartExpiries {
			d.ProcStart = time.Time{}
		}
	}
	return Report{Deadline: *d, Cause: cause}
}

// networkWaits are where a goroutine parked on a context's Done waits for
// the network: an HTTP round trip (HTTP/1, either HTTP/2 client), a
// connection from the pool or its dial, a gRPC stream, a TLS handshake.
var networkWaits = []string{
	"net/http.(*persistConn).", "net/http.(*http2ClientConn).", "net/http/internal/http2.",
	"net/http.(*Transport).getConn", "net/http.(*Transport).dialConn", "golang.org/x/net/http2.",
	"google.golang.org/grpc/internal/transport.", "google.golang.org/grpc.(*csAttempt)", "google.golang.org/grpc.(*clientStream)",
	"google.golang.org/grpc.(*serverStream).RecvMsg",
	"net.(*netFD).connect", "net.(*sysDialer).", "net.(*Dialer).", "crypto/tls.(*Conn).",
}

// dialWaits are where a request waits for a connection to be made: net/http's
// pool, which hands a waiting request the first connection any of its dials
// to the host delivers (or one put back idle), and a dial of its own.
var dialWaits = []string{"net/http.(*Transport).getConn", "net/http.(*Transport).queueForDial", "net.(*netFD).connect", "net.(*sysDialer).", "net.(*Dialer)."}

// dialWaiting weighs the process-wide guess against a request waiting for
// a connection at the expiry (waiting_at): when every connect of the
// process in the window that shows anything is in SYN retries, those are
// the connects it waited on, whichever would have served it, so the
// agreement is probable, not ambiguous. (A request waiting for the pool
// because every connection is busy with slow calls sees healthy
// connections beside the connects: that stays ambiguous.)
func dialWaiting(cause *Cause, d *event.Deadline) {
	if cause.Confidence != Ambiguous || cause.Class != ClassSynTimeout || !slices.ContainsFunc(dialWaits, func(p string) bool { return strings.HasPrefix(d.WaitingAt, p) }) {
		return
	}
	cause.Confidence = Probable
	cause.Note = joinNote(cause.Note, "the request was waiting for a connection at the expiry ("+d.WaitingAt+"), which the first of the process's connects to deliver would have served: they all showed unanswered SYNs")
}

func networkWait(at string) bool {
	for _, p := range networkWaits {
		if strings.HasPrefix(at, p) {
			return true
		}
	}
	return false
}

// checkWaiting weighs a local verdict against where the request was
// waiting at the expiry (waiting_at, read at the expiry). Waiting in a
// network call, it is not local: the tracer did not see that call's
// connection (older than the tracer, or never seen), and "local" for a
// blackholed peer would send the engineer the wrong way, so the class is
// unknown. Waiting elsewhere, the summary says where.
func checkWaiting(cause *Cause, d *event.Deadline) {
	if cause.Class != ClassLocal || d.WaitingAt == "" || heldLocal(cause) {
		return
	}
	if networkWait(d.WaitingAt) {
		was := cause.Summary
		cause.Class, cause.Confidence = ClassUnknown, None
		cause.Summary = fmt.Sprintf("the request was waiting in a network call at the expiry (%s), but the tracer saw no TCP I/O of it: its connection is not known", d.WaitingAt)
		cause.Note = joinNote(cause.Note, "without waiting_at the verdict was local ("+was+")")
		return
	}
	cause.Summary += "; waiting at " + d.WaitingAt
}

// waitCandidates examines the connections the context's waiters waited
// on at the expiry (read from their waiting frames, event.Waiter.Conn).
// That binding needs no detail probe and holds from the first expiry: it is
// the connection the request was blocked on when its time ran out, so it
// comes before the creating goroutine's bindings (a retried request's
// earlier connection is not what it waited on). A connection the tables do
// not hold is left out, said in the note; with none left, the other rules
// decide.
func (c *Correlator) waitCandidates(d *event.Deadline, sp span) ([]*evidence, string) {
	conns := d.WaitConns()
	if len(conns) == 0 {
		return nil, ""
	}
	// The detail tier's bindings of the creating goroutine that name the
	// same connection are said beside it: two probes agreeing.
	var probed []bound
	if d.Detail && d.CreatedGoid != 0 && sp.created != 0 {
		probed = c.boundIn(gkey{d.PID, d.CreatedGoid}, sp.lo, sp.expiry)
	}
	out := c.cands[:0]
	missing := 0
	for _, cookie := range conns {
		i, ok := c.sockByCookie.get(cookie)
		if !ok {
			missing++
			continue
		}
		via := "waiting:" + waitFrameOf(d, cookie)
		for _, b := range probed {
			if b.cookie == cookie {
				via += "+binding:" + sourceList(b.srcs)
			}
		}
		wsp := sp
		wsp.send, wsp.rcvAgo = sendAt(d, cookie)
		out = append(out, c.examine(i, wsp, via))
	}
	c.sortEvidence(out)
	c.cands = out
	if missing == 0 {
		return out, ""
	}
	return out, fmt.Sprintf("%s the request waited on at the expiry %s no record in the correlator's tables (no kernel event seen, or dropped: see stats)",
		plural(missing, "connection", "connections"), map[bool]string{true: "has", false: "have"}[missing == 1])
}

// settledRetransmits counts the retransmits after the expiry that the
// candidates left uncounted, their connections settled at it.
func settledRetransmits(cands []*evidence) int {
	n := 0
	for _, e := range cands {
		n += e.afterSettled
	}
	return n
}

// sendAt is connection cookie's send side at the expiry, as a waiter on
// it read it (all of them read the same socket at the same moment), and,
// for a connection that carries one request at a time (HTTP/1's
// persistConn), how long before the expiry its last data segment arrived
// (0 otherwise: on a multiplexed connection what was written and what
// arrived may be other streams').
func sendAt(d *event.Deadline, cookie uint64) (*event.SendState, time.Duration) {
	for _, w := range d.Waiters {
		if w.Conn == cookie && w.ConnSend != nil {
			if !oneAtATime(w.ConnFrame) {
				return w.ConnSend, 0
			}
			return w.ConnSend, w.ConnRcvAgo
		}
	}
	return nil, 0
}

// oneAtATime: the waiting frame belongs to a connection that carries one
// request at a time (HTTP/1's persistConn), so what it received and what
// it had written are that request's; a multiplexed connection's may be
// other streams'.
func oneAtATime(frame string) bool { return strings.HasPrefix(frame, "net/http.(*persistConn).") }

// waitFrameOf is the waiting frame that named connection cookie.
func waitFrameOf(d *event.Deadline, cookie uint64) string {
	for _, w := range d.Waiters {
		if w.Conn == cookie {
			return shortFunc(w.ConnFrame)
		}
	}
	return ""
}

// boundWaiters counts d's waiters bound to a connection.
func boundWaiters(d *event.Deadline) int {
	n := 0
	for _, w := range d.Waiters {
		if w.Conn != 0 {
			n++
		}
	}
	return n
}

// waitFrames lists the waiting frames that bound d, each once.
func waitFrames(d *event.Deadline) string {
	var fs []string
	for _, w := range d.Waiters {
		if f := shortFunc(w.ConnFrame); w.Conn != 0 && !slices.Contains(fs, f) {
			fs = append(fs, f)
		}
	}
	return strings.Join(fs, ", ")
}

// shortFunc drops the package path of a function name:
// "net/http.(*persistConn).roundTrip" is "http.(*persistConn).roundTrip".
func shortFunc(f string) string {
	if i := strings.LastIndexByte(f, '/'); i >= 0 {
		return f[i+1:]
	}
	return f
}

// exactCandidates examines the sockets bound to the creating goroutine.
func (c *Correlator) exactCandidates(d *event.Deadline, sp span) []*evidence {
	out := c.cands[:0]
	for _, b := range c.boundIn(gkey{d.PID, d.CreatedGoid}, sp.lo, sp.expiry) {
		via := "binding:" + sourceList(b.srcs)
		i, ok := c.sockByCookie.get(b.cookie)
		if !ok {
			// Bindings create their socket: only an eviction loses it.
			e := c.newEvidence()
			e.s, e.cookie, e.via, e.class = &socket{cookie: b.cookie}, b.cookie, via, ClassUnknown
			e.why = fmt.Sprintf("socket %#x was dropped from the correlator's tables (see stats)", b.cookie)
			out = append(out, e)
			continue
		}
		out = append(out, c.examine(i, sp, via))
	}
	c.sortEvidence(out)
	c.cands = out
	return out
}

// processCandidates examines the process's sockets in use in the window.
func (c *Correlator) processCandidates(d *event.Deadline, sp span) []*evidence {
	p := c.procs[d.PID]
	if p == nil {
		return nil
	}
	out := c.cands[:0]
	for _, i := range p.socks {
		s := &c.socks[i]
		tcp, act := c.activeIn(s, sp.lo, sp.expiry)
		var via string
		switch {
		case tcp && act:
			via = "activity+tcp"
		case act:
			via = "activity"
		case tcp:
			via = "tcp"
		default:
			continue
		}
		out = append(out, c.examine(i, sp, via))
	}
	c.sortEvidence(out)
	c.cands = out
	return out
}

// sortEvidence orders candidates for the report: trouble first, most
// specific first, connections this side opened before accepted ones, then
// by their first event in the window. Cookies are
// distinct among candidates, so the order is total. The sort runs on a
// compact copy of the keys: comparing through the pointers reads a cache
// line of a different evidence at every step.
func (c *Correlator) sortEvidence(es []*evidence) {
	keys := c.sortKeys[:0]
	for _, e := range es {
		keys = append(keys, evKey{rank: e.class.rank(), inbound: e.s.inbound, first: e.first, cookie: e.cookie, e: e})
	}
	slices.SortFunc(keys, func(a, b evKey) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		// A server's own callers after what it called: its deadline
		// waited on the upstream (issue 17: every report of a proxy over
		// a slow upstream named the inbound client first, and the span's
		// network.peer.* was the caller).
		if a.inbound != b.inbound {
			if b.inbound {
				return -1
			}
			return 1
		}
		if a.first != b.first {
			return cmp.Compare(a.first, b.first)
		}
		return cmp.Compare(a.cookie, b.cookie)
	})
	for i, k := range keys {
		es[i] = k.e
	}
	clear(keys) // drop the pointers until the next sort
	c.sortKeys = keys[:0]
}

type evKey struct {
	rank          int
	inbound       bool
	first, cookie uint64
	e             *evidence
}

func sourceList(bits uint8) string {
	var names []string
	// Call probes first: they are what made the binding exact.
	for _, s := range []source{srcHTTP, srcGRPC, srcDial, srcKernelG, srcActivity, srcOther} {
		if bits&(1<<s) != 0 {
			names = append(names, s.String())
		}
	}
	return strings.Join(names, "+")
}

// decideExact: the request's own connections. The most specific trouble
// any of them shows is the cause (the request used all of them); healthy
// ones only make it slow_peer when none shows trouble.
func (c *Correlator) decideExact(cause *Cause, cands []*evidence, d *event.Deadline) {
	cause.Confidence = Exact
	best := ClassUnknown
	healthy, unknown := 0, 0
	for _, e := range cands {
		switch {
		case e.class.Network():
			if e.class.rank() < best.rank() || !best.Network() {
				best = e.class
			}
		case e.class == ClassSlowPeer:
			healthy++
		default:
			unknown++
		}
	}
	switch {
	case best.Network():
		cause.Class = best
	case unknown == 0 && healthy > 0:
		cause.Class = ClassSlowPeer
	default:
		cause.Class = ClassUnknown
	}
	cause.Summary = summarize(cause.Class, cands, cause.Window)
	cause.Note = fmt.Sprintf("bound to goroutine %d of pid %d", d.CreatedGoid, d.PID)
}

// decideProcess: the process-wide guess, or its absence.
func (c *Correlator) decideProcess(cause *Cause, cands []*evidence, d *event.Deadline, w Window) {
	// Sockets the process closed before the expiry were some earlier
	// call's: a call whose connection is closed under it fails then, it
	// does not wait for its deadline. Listed last, and left out of the
	// decision while others remain (a storm's second wave: the first
	// wave's connections, in RTOs and closed with their calls, beside
	// the new connections in SYN retries that the second wave waited on).
	open := 0
	for _, e := range cands {
		if !e.closedBefore {
			open++
		}
	}
	if open > 0 && open < len(cands) {
		toFront(cands, func(e *evidence) bool { return !e.closedBefore })
		// Leaving the closed ones out must not make a lone open socket
		// with only mild evidence the answer: one tail loss probe or fast
		// retransmit of a starved client on a healthy network read tlp
		// that way (TestLocalGCPause, once in 4 CI runs).
		if open == 1 && (cands[0].class == ClassTLP || cands[0].class == ClassFastRetransmit) {
			c.decideOpen(cause, cands, d, w)
			return
		}
		closed := len(cands) - open
		c.decideOpen(cause, cands[:open], d, w)
		note := fmt.Sprintf("%s of pid %d in use in the window %s closed by the process before the expiry: left out (a call whose connection is closed fails then, it does not wait for its deadline)",
			plural(closed, "socket", "sockets"), d.PID, map[bool]string{true: "was", false: "were"}[closed == 1])
		if cause.Note != "" {
			note = cause.Note + "; " + note
		}
		cause.Note = note
		return
	}
	c.decideOpen(cause, cands, d, w)
}

// decideOpen is decideProcess over the candidates that count.
func (c *Correlator) decideOpen(cause *Cause, cands []*evidence, d *event.Deadline, w Window) {
	if onlyQuietCallers(cause, cands, d, "where its goroutine was is not known",
		"the goroutine that set the deadline is read at the expiry by the detail tier (--detail always, or auto from the process's next expiry)") {
		return
	}
	switch len(cands) {
	case 0:
		p := c.procs[d.PID]
		if p != nil && p.oldConns > 0 && w.Start < p.oldAt && p.oldAt <= w.End {
			cause.Class, cause.Confidence = ClassUnknown, None
			cause.Summary = fmt.Sprintf("pid %d did no TCP I/O since it was attached, %s before the expiry, but held %s then, older than the tracer: what they were waiting on is unknown",
				d.PID, fmtDur(w.End-p.oldAt), plural(int(p.oldConns), "connection", "connections"))
			return
		}
		if p != nil && p.hasActivity && p.firstActivity <= w.End+uint64(c.cfg.Grace) {
			cause.Class, cause.Confidence = ClassLocal, Probable
			cause.Summary = fmt.Sprintf("pid %d did no TCP I/O %s: it waited on something local (pool, lock, queue)", d.PID, during(w))
			return
		}
		cause.Class, cause.Confidence = ClassUnknown, None
		cause.Summary = fmt.Sprintf("no binding and no socket activity known for pid %d", d.PID)
		return
	case 1:
		if cands[0].class == ClassTLP {
			// Nothing bound the request to this socket, and a tail loss
			// probe is what a peer's delayed ACK draws on a healthy
			// network: it names no cause of a request it may not have
			// carried (TestLocalGCPause: a request waiting for a
			// connection in getConn read tlp from the process's one
			// pooled socket, 1 time of 284 in CI).
			cause.Class, cause.Confidence = ClassUnknown, None
			cause.Summary = fmt.Sprintf("the only socket of pid %d in use in the window, to %s, showed only a tail loss probe, and nothing bound the request to it: no cause named",
				d.PID, cands[0].peerName())
			cause.Note = "a tail loss probe alone is what a peer's delayed ACK draws on a healthy network"
			return
		}
		cause.Confidence = Probable
		cause.Class = cands[0].class
		if cause.Class == ClassUnknown {
			cause.Summary = cands[0].why
		} else {
			cause.Summary = summarize(cause.Class, cands, w)
		}
		cause.Note = fmt.Sprintf("the only socket of pid %d in use in the window", d.PID)
		return
	}
	if c.decideClosed(cause, cands, d, w) {
		return
	}
	if c.decideDominant(cause, cands, d, w) {
		return
	}
	cause.Confidence = Ambiguous
	agreed := cands[0].class
	for _, e := range cands[1:] {
		if e.class != agreed {
			agreed = ClassUnknown
			break
		}
	}
	cause.Class = agreed
	if agreed == ClassUnknown {
		cause.Summary = fmt.Sprintf("%d sockets of pid %d were in use in the window and disagree: %s", len(cands), d.PID, disagreement(cands))
		return
	}
	cause.Summary = summarize(agreed, cands, w)
	cause.Note = fmt.Sprintf("%d sockets of pid %d were in use in the window and all show %s", len(cands), d.PID, agreed)
}

// callersOnly: the goroutine that set the deadline was bound in the window
// (its own socket I/O) only to connections the process accepted, healthy,
// and no waiting frame said where it was at the expiry. Bound to its
// caller's connection, it had been reading the caller's request or writing
// its answer; what it waited on at the expiry may be the rest of that
// request (a slow client) or something local it went on to (a lock, a
// queue): "the client did not answer" is neither. Measured: a net/http
// handler reading a stalled upload over TLS (its body read lies deeper in
// its stack than the frames the probe keeps) read slow_peer "CLIENT did
// not answer", exact, 8 of 8, with the detail tier on. The verdict is
// unknown, saying so, as onlyQuietCallers does without the detail tier.
func callersOnly(cause *Cause, cands []*evidence, d *event.Deadline) {
	if cause.Class != ClassSlowPeer {
		return
	}
	onlyQuietCallers(cause, cands, d,
		fmt.Sprintf("goroutine %d, bound to them in the window, was parked at the expiry in no waiting frame the probe reads", d.CreatedGoid),
		fmt.Sprintf("bound to goroutine %d of pid %d by its own I/O on %s it accepted", d.CreatedGoid, d.PID,
			map[bool]string{true: "the connection", false: "connections"}[len(cands) == 1]))
}

// onlyQuietCallers: every candidate is a connection the process accepted
// (its callers'), healthy, and nothing bound the deadline to one of them.
// A server asks nothing of its callers, so "the client did not answer" is
// no answer: the handler was either reading a caller's request (a slow
// client) or waiting on something local (a lock, a queue, a non-TCP call),
// and without where its goroutine was parked (the detail tier reads the
// deadline's creator at the expiry) the two look the same. Measured: a
// net/http handler whose upload stalled read slow_peer "CLIENT did not
// answer", 8 of 8, with the detail tier off. The verdict is unknown,
// saying so, rather than blaming the caller.
// where says what is known of where its goroutine was, note is the
// cause's note.
func onlyQuietCallers(cause *Cause, cands []*evidence, d *event.Deadline, where, note string) bool {
	if len(cands) == 0 {
		return false
	}
	for _, e := range cands {
		if !e.s.inbound || e.class != ClassSlowPeer {
			return false
		}
	}
	peers := make([]string, 0, len(cands))
	for _, e := range cands {
		peers = append(peers, e.addr().peer.String())
	}
	cause.Class, cause.Confidence = ClassUnknown, None
	cause.Summary = fmt.Sprintf("pid %d waited on no outbound connection: the %s in use in the window, %s, accepted and healthy, %s its callers'; it was reading a caller's request (slow_client) or waiting on something local, and %s",
		d.PID, plural(len(cands), "socket", "sockets"), strings.Join(peers, ", "), map[bool]string{true: "was", false: "were"}[len(cands) == 1], where)
	cause.Note = note
	return true
}

// decideClosed: of several candidates, the ones the process closed within
// CloseWindow after the expiry. A call cancelled by its deadline closes
// its connection with it (net/http's HTTP/1 transport, database drivers),
// the other connections in use stay open: a storm's first wave without
// bindings had 4 connections in RTOs, closed within a millisecond of their
// requests' expiries, beside the new connections the other workers opened
// (SYN_SENT, nothing to show yet), and was unknown. When the closed ones
// agree on a class, it is the answer (probable), and they are listed
// first; else, or when none or all were closed, it decides nothing.
func (c *Correlator) decideClosed(cause *Cause, cands []*evidence, d *event.Deadline, w Window) bool {
	n := 0
	for _, e := range cands {
		if e.closedAfter {
			n++
		}
	}
	if n == 0 || n == len(cands) {
		return false
	}
	var agreed Class
	for _, e := range cands {
		if !e.closedAfter {
			continue
		}
		if agreed == "" {
			agreed = e.class
		} else if e.class != agreed {
			return false
		}
	}
	// A tail loss probe alone is no proof of loss: it fires when an ACK
	// is two round trips late, which a peer's delayed ACK does on a
	// healthy network. Among other candidates, a connection closed with
	// the call that shows only that decides nothing (TestLocalGCPause in
	// CI: one of 52 sockets of a churning client, closed with its call
	// after one TLP, read tlp on a healthy network).
	if agreed == ClassUnknown || agreed == ClassTLP {
		return false
	}
	toFront(cands, func(e *evidence) bool { return e.closedAfter })
	cause.Class, cause.Confidence = agreed, Probable
	cause.Summary = summarize(agreed, cands[:n], w)
	cause.Note = fmt.Sprintf("pid %d closed %s within %s of the expiry (a call cancelled by its deadline closes its connection), all showing %s; %s in use in the window stayed open",
		d.PID, plural(n, "connection", "connections"), fmtDur(uint64(c.cfg.CloseWindow)), describe(agreed), plural(len(cands)-n, "other socket", "other sockets"))
	return true
}

// decideDominant: several candidates that disagree only through weak
// ones, which say nothing against the trouble the others show:
//
//   - a connect still in its handshake, not retried yet, to a peer other
//     candidates show network trouble with: the same trouble, younger;
//   - a connection that looked healthy, to such a peer, whose last event
//     came before that trouble's first: it was healthy before the trouble
//     began (a pooled connection idle since);
//   - an accepted connection (this side the server: the caller's) showing
//     nothing, when outbound candidates show trouble: the process waited
//     on what it called, not on its caller.
//
// The first wave of a storm without a binding: vegeta at 20 requests/s on
// a server blackholed mid-run had 62 sockets in the window, 55 in SYN
// retries to the server, the newest connects not retried yet and the
// pool's idle connections healthy: 31 of 71 timeouts read unknown ("the
// sockets disagree"); blackbox_exporter's probes, beside the scrape's
// inbound connection, 4 of 5. When the others then agree on a network
// class, that is the answer, ambiguous (several sockets), the weak ones
// listed last and counted in the note. A healthy connection to another
// peer is never weak: a slow backend beside a blackholed one stays
// unknown.
func (c *Correlator) decideDominant(cause *Cause, cands []*evidence, d *event.Deadline, w Window) bool {
	trouble := map[netip.AddrPort]uint64{} // peer -> its first trouble event
	outbound := false
	for _, e := range cands {
		if !e.class.Network() {
			continue
		}
		peer, t := e.addr().peer, e.troubleStart()
		if cur, ok := trouble[peer]; !ok || t < cur {
			trouble[peer] = t
		}
		outbound = outbound || !e.s.inbound
	}
	if len(trouble) == 0 {
		return false
	}
	weak := func(e *evidence) bool {
		start, troubled := trouble[e.addr().peer]
		switch {
		case e.s.inbound && !e.class.Network() && outbound:
			return e.class == ClassSlowPeer || e.class == ClassUnknown
		case !troubled:
			return false
		case e.youngSyn:
			return true
		case e.class == ClassSlowPeer:
			return e.last < start
		}
		return false
	}
	nWeak := 0
	var agreed Class
	for _, e := range cands {
		if weak(e) {
			nWeak++
			continue
		}
		if agreed == "" {
			agreed = e.class
		} else if e.class != agreed {
			return false
		}
	}
	// Mild evidence (one TLP, a fast retransmit) does not outweigh others.
	if nWeak == 0 || nWeak == len(cands) || !agreed.Network() || agreed == ClassTLP || agreed == ClassFastRetransmit {
		return false
	}
	toFront(cands, func(e *evidence) bool { return !weak(e) })
	strong := len(cands) - nWeak
	cause.Class, cause.Confidence = agreed, Ambiguous
	cause.Summary = summarize(agreed, cands[:strong], w)
	cause.Note = fmt.Sprintf("%d sockets of pid %d in use in the window show %s; %s left out: connects not retried yet to the same peer, connections healthy before its trouble began, or accepted ones (its callers') showing nothing",
		strong, d.PID, describe(agreed), plural(nWeak, "other", "others"))
	return true
}

// toFront moves the candidates that match to the front, each part in its
// order.
func toFront(cands []*evidence, match func(*evidence) bool) {
	slices.SortStableFunc(cands, func(a, b *evidence) int {
		switch ma, mb := match(a), match(b); {
		case ma == mb:
			return 0
		case ma:
			return -1
		}
		return 1
	})
}

// describe names a connection's class in a list.
func describe(c Class) string {
	switch c {
	case ClassSlowPeer:
		return "healthy"
	case ClassUnknown:
		return "undetermined"
	}
	return string(c)
}

// connections turns the evidence, in sortEvidence's order, into the
// report's connection list, at most max, each with at most maxEvents of its
// events; the note says how many connections were left out.
func connections(es []*evidence, d *event.Deadline, max, maxEvents int) ([]Connection, string) {
	var note string
	if len(es) > max {
		note = fmt.Sprintf("%d of %d candidate sockets listed", max, len(es))
		es = es[:max]
	}
	out := make([]Connection, 0, len(es))
	// The listed events of all connections share one array: one
	// allocation per report rather than one per connection.
	total := 0
	for _, e := range es {
		total += min(len(e.evs), maxEvents)
	}
	evbuf := make([]ConnEvent, 0, total)
	for _, e := range es {
		cn := Connection{
			Cookie: e.cookie, Local: e.addr().local, Peer: e.addr().peer, Class: e.class, Via: e.via,
			Suppressed: e.supp, Sent: e.sent, Received: e.recv,
		}
		switch {
		case e.s.outbound:
			cn.Direction = "outbound"
		case e.s.inbound:
			cn.Direction = "inbound"
		}
		if s := e.send; s != nil {
			cn.AtExpiry = &SendAtExpiry{UnackedBytes: s.Unacked, CAState: event.CAStateName(s.CAState),
				RetransOut: s.RetransOut, LostOut: s.LostOut, Recovering: s.Recovering()}
			if s.State != 0 {
				cn.AtExpiry.TCPState = s.State.String()
			}
		}
		for k, n := range e.n {
			if n > 0 {
				if cn.Counts == nil {
					cn.Counts = make(map[string]int)
				}
				cn.Counts[event.TCPKind(k).String()] = n
			}
		}
		if e.snap != nil {
			cn.SRTTUs, cn.RTOMs, cn.Backoff = int64(e.snap.srttUs), int64(e.snap.rtoUs+500)/1000, e.snap.backoff
		}
		if e.state != nil && e.state.state != 0 {
			cn.State = e.state.state.String()
		}
		if e.seen {
			cn.FirstMono, cn.LastMono = e.first, e.last
			cn.First, cn.Last = wallOf(d, e.first), wallOf(d, e.last)
		}
		n := len(evbuf)
		evbuf, cn.EventsOmitted = timeline(evbuf, e.evs, d, maxEvents)
		if len(evbuf) > n {
			cn.Events = evbuf[n:len(evbuf):len(evbuf)] // capped: an append by the caller copies
		}
		out = append(out, cn)
	}
	return out, note
}

// wallOf converts a CLOCK_MONOTONIC time to wall clock through the
// deadline's own pair of clocks (zero when the deadline has no wall time).
func wallOf(d *event.Deadline, mono uint64) time.Time {
	if d.Time.IsZero() {
		return time.Time{}
	}
	return d.Time.Add(time.Duration(int64(mono - d.Mono))).UTC()
}

// dialingIn reports whether any of the process's candidate sockets was in its handshake
// in the window: a SYN retry, a failed or aborted connect, or a connect
// that never got established.
func dialingIn(cands []*evidence) bool {
	for _, e := range cands {
		if e.n[event.TCPSynRetransmit] > 0 || e.connTimedOut || e.connRejected != 0 || e.abortedRetry || e.abortedBare ||
			(e.n[event.TCPConnect] > 0 && !e.established) {
			return true
		}
	}
	return false
}

// timeline appends to dst a connection's events in the window in time
// order (the arrival order on a tie), keeping the newest max: those
// leading up to the expiry, and says how many it left out. Counts and
// First still cover the ones left out.
func timeline(dst []ConnEvent, recs []*tcpRec, d *event.Deadline, max int) ([]ConnEvent, int) {
	if len(recs) == 0 {
		return dst, 0
	}
	// examine collected them newest first.
	slices.Reverse(recs)
	slices.SortStableFunc(recs, func(a, b *tcpRec) int { return cmp.Compare(a.mono, b.mono) })
	omitted := 0
	if len(recs) > max {
		omitted = len(recs) - max
		recs = recs[omitted:]
	}
	for _, r := range recs {
		dst = append(dst, ConnEvent{
			Kind: r.kind.String(), Mono: r.mono, Time: wallOf(d, r.mono),
			RTOMs: int64(r.rtoUs+500) / 1000, SRTTUs: int64(r.srttUs), Backoff: r.backoff, Retransmits: r.retransmits,
			Error:       (&event.TCP{Errno: syscall.Errno(r.errno)}).ErrnoName(),
			AfterExpiry: r.mono > d.Mono,
			AtAttach:    r.atAttach,
		})
	}
	return dst, omitted
}
