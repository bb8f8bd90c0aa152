package correlate

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// A scenario builds a realistic event stream in milliseconds from its
// start, the way the lab's faults produce them (see ../../shared/LAB.md):
// the arithmetic of RTO backoff and activity rate limits is code, not
// hand-typed numbers.
type scenario struct {
	name, note string
	evs        []event.Any
	lastAct    map[uint64]actMark // per socket: the activity producer's rate limit
}

type actMark struct {
	ms   float64
	goid uint64
}

// Stream time starts an hour after boot, wall time on a fixed day.
const baseMono = uint64(3_600_000_000_000)

var baseWall = time.Date(2026, 11, 29, 17, 31, 0, 0, time.UTC)

func newScenario(name, note string) *scenario {
	return &scenario{name: name, note: note, lastAct: map[uint64]actMark{}}
}

func mono(ms float64) uint64 { return baseMono + uint64(math.Round(ms*1e6)) }

func wall(ms float64) time.Time { return baseWall.Add(time.Duration(math.Round(ms * 1e6))) }

func (sc *scenario) add(ev event.Any) { sc.evs = append(sc.evs, ev) }

// events returns the stream in time order (stable: equal times keep the
// order they were added in).
func (sc *scenario) events() []event.Any {
	out := slices.Clone(sc.evs)
	slices.SortStableFunc(out, func(a, b event.Any) int { return cmp.Compare(a.MonoTime(), b.MonoTime()) })
	return out
}

type conn struct {
	sc          *scenario
	cookie      uint64
	pid         uint32
	comm        string
	local, peer netip.AddrPort
	srtt        time.Duration
	backoff     uint8
}

func (sc *scenario) conn(cookie uint64, pid uint32, comm, local, peer string, srtt time.Duration) *conn {
	return &conn{sc: sc, cookie: cookie, pid: pid, comm: comm,
		local: netip.MustParseAddrPort(local), peer: netip.MustParseAddrPort(peer), srtt: srtt}
}

type tcpOpt func(*event.TCP)

func state(s event.TCPState) tcpOpt       { return func(e *event.TCP) { e.State = s } }
func oldState(s event.TCPState) tcpOpt    { return func(e *event.TCP) { e.OldState = s } }
func errno(n syscall.Errno) tcpOpt        { return func(e *event.TCP) { e.Errno = n } }
func retrans(n uint8) tcpOpt              { return func(e *event.TCP) { e.Retransmits = n } }
func sndWnd(n uint32) tcpOpt              { return func(e *event.TCP) { e.SndWnd = n } }
func rto(d time.Duration, b uint8) tcpOpt { return func(e *event.TCP) { e.RTO, e.Backoff = d, b } }
func suppressed(n uint32) tcpOpt          { return func(e *event.TCP) { e.Suppressed = n } }
func atAttach() tcpOpt                    { return func(e *event.TCP) { e.AtAttach = true } }

const (
	established event.TCPState = 1
	synSent     event.TCPState = 2
	finWait1    event.TCPState = 4
	closed      event.TCPState = 7
)

// tcp adds a kernel TCP event with a plausible socket snapshot.
func (cn *conn) tcp(ms float64, kind event.TCPKind, opts ...tcpOpt) {
	e := &event.TCP{
		Time: wall(ms), Mono: mono(ms), Kind: kind, PID: cn.pid, Comm: cn.comm,
		CgroupID: 0x2a1f, NetNS: 4026532281, Cookie: cn.cookie, Local: cn.local, Peer: cn.peer,
		State: established, OldState: established, SRTT: cn.srtt, RTTVar: cn.srtt / 2, RTO: 204 * time.Millisecond,
		Cwnd: 10, SndWnd: 64240, TotalRetrans: 0,
	}
	switch kind {
	case event.TCPRTO:
		e.CAState, e.Cwnd, e.LostOut, e.RetransOut = 4, 1, 1, 1
	case event.TCPFastRetransmit:
		e.CAState, e.Cwnd, e.RetransOut = 3, 7, 1
	case event.TCPSynRetransmit:
		e.State, e.OldState, e.CAState, e.SRTT, e.RTTVar, e.RTO = synSent, synSent, 4, 0, 0, time.Second
	case event.TCPConnect:
		e.State, e.OldState, e.SRTT, e.RTTVar, e.RTO = synSent, closed, 0, 0, time.Second
	case event.TCPEstablished:
		e.OldState = synSent
	case event.TCPClose:
		e.State, e.OldState = closed, finWait1
	}
	for _, o := range opts {
		o(e)
	}
	if e.State == synSent || (e.OldState == synSent && e.State != established) {
		// Before the handshake completes there is no RTT sample and the
		// timer runs at the initial SYN RTO, doubled per retry.
		e.SRTT, e.RTTVar, e.RTO = 0, 0, time.Second<<e.Retransmits
	}
	cn.sc.add(e)
}

// act adds an activity sample as the kernel emits them: at most one per
// second per socket, and at once when another goroutine takes over.
func (cn *conn) act(ms float64, goid uint64, sent bool) {
	if last, ok := cn.sc.lastAct[cn.cookie]; ok && last.goid == goid && ms-last.ms < 1000 {
		return
	}
	cn.sc.lastAct[cn.cookie] = actMark{ms, goid}
	cn.sc.add(&event.SockActivity{Mono: mono(ms), PID: cn.pid, Cookie: cn.cookie, Local: cn.local, Peer: cn.peer,
		Goid: goid, Sent: sent, Received: !sent})
}

// actTCP adds the same sample in the collector's own form: a TCP event of
// kind activity.
func (cn *conn) actTCP(ms float64, goid uint64, sent bool) {
	if last, ok := cn.sc.lastAct[cn.cookie]; ok && last.goid == goid && ms-last.ms < 1000 {
		return
	}
	cn.sc.lastAct[cn.cookie] = actMark{ms, goid}
	cn.sc.add(&event.TCP{Time: wall(ms), Mono: mono(ms), Kind: event.TCPActivity, PID: cn.pid, Comm: cn.comm,
		Cookie: cn.cookie, Local: cn.local, Peer: cn.peer, State: established, Goid: goid, Sent: sent})
}

func (cn *conn) bind(ms float64, goid uint64, src string) {
	cn.sc.add(&event.Binding{Mono: mono(ms), PID: cn.pid, Goid: goid, Cookie: cn.cookie, Source: src})
}

// handshake adds connect and established, with the dial bound to goid.
func (cn *conn) handshake(ms float64, goid uint64) {
	if goid != 0 {
		cn.bind(ms, goid, event.BindDial)
	}
	cn.tcp(ms+0.01, event.TCPConnect)
	cn.tcp(ms+0.01+2*cn.srtt.Seconds()*1000, event.TCPEstablished)
}

// blackhole adds what a connection whose packets are all dropped after
// sentMs shows until untilMs: a tail loss probe, then RTOs doubling from
// 204 ms (the kernel's snapshot is taken before the backoff doubles it).
func (cn *conn) blackhole(sentMs, untilMs float64) {
	pto := sentMs + 2*cn.srtt.Seconds()*1000 + 200
	if pto > untilMs {
		return
	}
	cn.tcp(pto, event.TCPTLP)
	r, t := 204*time.Millisecond, pto+204
	for b := uint8(0); t <= untilMs; b++ {
		cn.tcp(t, event.TCPRTO, rto(r, b), retrans(b+1))
		t += float64(2*r) / 1e6
		r *= 2
	}
}

// refusedConnect adds one connect answered by RST (nothing listening, or
// REJECT with tcp-reset).
func (cn *conn) refusedConnect(ms float64, goid uint64) {
	if goid != 0 {
		cn.bind(ms, goid, event.BindDial)
	}
	cn.tcp(ms+0.01, event.TCPConnect)
	cn.tcp(ms+0.2, event.TCPResetReceived, state(synSent), oldState(synSent))
	cn.tcp(ms+0.21, event.TCPConnectFailed, state(closed), oldState(synSent), errno(syscall.ECONNREFUSED))
}

type dlOpt func(*event.Deadline)

func noDetail() dlOpt {
	return func(d *event.Deadline) {
		d.Detail, d.CreatedMono, d.Created, d.CreatedGoid, d.CreatedAt, d.CreatedStack, d.CreatedPC = false, 0, time.Time{}, 0, "", nil, 0
	}
}

// firedLate: the timer fired ms after the deadline (a starved runtime).
func firedLate(ms float64) dlOpt {
	return func(d *event.Deadline) { d.Mono += uint64(ms * 1e6); d.Time = d.Time.Add(time.Duration(ms * 1e6)) }
}
func expiredAtCreation() dlOpt { return func(d *event.Deadline) { d.Kind = event.ExpiredAtCreation } }
func traced(trace, span string) dlOpt {
	return func(d *event.Deadline) {
		d.TraceID, d.SpanID, d.TraceSource, d.TraceSampled = trace, span, "otel_context", true
	}
}

// deadline adds an expired deadline created at createdMs by goroutine goid
// with the given budget, as the cold and detail probes report it.
func (sc *scenario) deadline(pid uint32, comm string, createdMs, budgetMs float64, goid uint64, at string, opts ...dlOpt) {
	exp := createdMs + budgetMs
	d := &event.Deadline{
		Time: wall(exp + 0.05), Mono: mono(exp + 0.05), Kind: event.TimerFired, PID: pid, TID: pid + 3, Comm: comm,
		Goid: 900 + goid, Ctx: 0xc000120000 + goid*0x100, Deadline: wall(exp),
		TraceNote: "no span in the context chain",
		Detail:    true, CreatedMono: mono(createdMs), Created: wall(createdMs), CreatedPC: 0x6a1f3c + goid,
		CreatedAt: at, CreatedStack: []string{at, "main.worker (/src/labapp/main.go:140)"}, CreatedGoid: goid,
	}
	for _, o := range opts {
		o(d)
	}
	if d.Kind == event.ExpiredAtCreation {
		d.Time, d.Mono = wall(createdMs), mono(createdMs)
	}
	sc.add(d)
}

func (sc *scenario) String() string { return fmt.Sprintf("%s (%d events)", sc.name, len(sc.evs)) }

// local adds an interval of local time lost by pid, from startMs to endMs.
func (sc *scenario) local(pid uint32, k event.LocalKind, startMs, endMs, lostMs float64, count uint32) {
	sc.add(&event.Local{Start: mono(startMs), Mono: mono(endMs), PID: pid, Kind: k,
		Lost: time.Duration(math.Round(lostMs * 1e6)), Count: count})
}

// sampled adds the samples of a periodic local source for pid: every
// periodMs from fromMs to toMs, lostMs lost in each period.
func (sc *scenario) sampled(pid uint32, k event.LocalKind, fromMs, toMs, periodMs, lostMs float64, count uint32) {
	for t := fromMs; t+periodMs <= toMs; t += periodMs {
		sc.local(pid, k, t, t+periodMs, lostMs, count)
	}
}
