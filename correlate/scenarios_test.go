package correlate

import (
	"fmt"
	"syscall"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// want is what a golden test asserts about each report, in order, beyond
// the golden bytes: the rules, stated once more by hand.
type want struct {
	class Class
	conf  Confidence
}

type goldenCase struct {
	build func() *scenario
	want  []want
}

const at = "main.callBackend (/src/labapp/main.go:88)"

// goldenCases are the synthetic streams behind testdata/<name>.events.
var goldenCases = map[string]goldenCase{
	"rto":             {rtoScenario, []want{{ClassRTO, Exact}}},
	"syn_timeout":     {synTimeoutScenario, []want{{ClassSynTimeout, Exact}, {ClassUnknown, Exact}, {ClassSynTimeout, Exact}}},
	"reset":           {resetScenario, []want{{ClassReset, Exact}}},
	"refused":         {refusedScenario, []want{{ClassRefused, Exact}, {ClassRefused, Ambiguous}}},
	"zero_window":     {zeroWindowScenario, []want{{ClassZeroWindow, Exact}}},
	"fast_retransmit": {fastRetransmitScenario, []want{{ClassFastRetransmit, Exact}}},
	"tlp":             {tlpScenario, []want{{ClassTLP, Exact}}},
	"slow_peer":       {slowPeerScenario, []want{{ClassSlowPeer, Exact}, {ClassSlowPeer, Probable}}},
	"local":           {localScenario, []want{{ClassLocal, Probable}, {ClassLocal, Probable}, {ClassRTO, Exact}, {ClassLocal, Probable}}},
	"unknown":         {unknownScenario, []want{{ClassUnknown, None}, {ClassUnknown, None}}},
	"ambiguous":       {ambiguousScenario, []want{{ClassUnknown, Ambiguous}, {ClassRTO, Ambiguous}, {ClassUnknown, Ambiguous}}},
	"mixed":           {mixedScenario, nil}, // checked by TestMixedRunNeverBlamesTheNetworkForSlowRequests
	"local_causes": {localCausesScenario, []want{{ClassCPUThrottled, Exact}, {ClassRunqueueDelay, Probable}, {ClassGCPause, Probable},
		{ClassRTO, Exact}, {ClassSlowPeer, Exact}, {ClassCPUThrottled, Probable}, {ClassRunqueueDelay, Probable}, {ClassLocal, Probable},
		{ClassRunqueueDelay, Exact}, {ClassSlowPeer, Exact}}},
	"detailless": {detaillessScenario, []want{{ClassSlowPeer, Probable}, {ClassRTO, Probable}, {ClassLocal, Probable}}},
	"at_attach":  {atAttachScenario, []want{{ClassZeroWindow, Probable}, {ClassRTO, Probable}, {ClassSynTimeout, Probable}}},
}

// at_attach: the tracer attached (at 3300 ms) to a process whose request
// had been in RTO backoff since 0 (RTOs at 0.2, 0.6, 1.4, 3 s; the next at
// 6.2 s, after the deadline at 5.7 s): no hook runs for the socket between
// the attach and the expiry, and only its state read at the attach (an
// rto record, at_attach: backoff 4, RTO 3264 ms) says what it waited on.
// Likewise a connect retried twice by then (next retry at 7 s, after the
// 6.5 s deadline), and a peer whose window was closed, probed with backoff 3.
func atAttachScenario() *scenario {
	sc := newScenario("at_attach", "attached mid-incident: a connection in RTO backoff since before the tracer, known from its state at the attach")
	a := sc.conn(0xa701, 7700, "vegeta", "10.213.0.1:57000", "10.213.0.2:8080", 100*time.Microsecond)
	a.tcp(3300, event.TCPRTO, rto(3264*time.Millisecond, 4), retrans(4), atAttach())
	sc.deadline(7700, "vegeta", 0, 5700, 0, "", noDetail())
	b := sc.conn(0xa801, 7800, "hey", "10.213.0.1:57100", "10.213.0.3:8080", 0)
	b.tcp(3500, event.TCPSynRetransmit, retrans(2), atAttach())
	sc.deadline(7800, "hey", 0, 6500, 0, "", noDetail())
	c := sc.conn(0xa901, 7900, "etcdctl", "10.213.0.1:57200", "10.213.0.4:2379", 100*time.Microsecond)
	c.tcp(3600, event.TCPZeroWindow, sndWnd(0), rto(1600*time.Millisecond, 3), atAttach())
	sc.deadline(7900, "etcdctl", 0, 5000, 0, "", noDetail())
	return sc
}

// rto: a blackhole after the handshake (iptables DROP on the server): a
// tail loss probe, then RTOs at backoff 0, 1, 2 while the request waits.
// Another connection of the process is busy and healthy meanwhile.
func rtoScenario() *scenario {
	sc := newScenario("rto", "blackhole after the handshake: TLP, then RTO backoff 0,1,2 (rto 204→408→816 ms)")
	a := sc.conn(0x1001, 4242, "labapp", "10.213.0.1:41544", "10.213.0.2:8080", 81*time.Microsecond)
	b := sc.conn(0x1002, 4242, "labapp", "10.213.0.1:41560", "10.213.0.3:8080", 95*time.Microsecond)
	a.handshake(0, 51)
	a.act(0.2, 51, true)
	b.handshake(0.5, 52)
	// The request at 1000 ms is never answered: everything is dropped.
	a.bind(1000.02, 51, event.BindHTTPRoundTrip)
	a.act(1000.05, 51, true)
	a.blackhole(1000.05, 4300) // the RTO at 4261 ms comes after the grace window: not counted
	for t := 1000.0; t < 3500; t += 400 {
		b.bind(t, 52, event.BindHTTPRoundTrip)
		b.act(t+0.02, 52, true)
		b.act(t+0.4, 52, false)
	}
	sc.deadline(4242, "labapp", 1000, 2000, 51, at, traced("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"))
	return sc
}

// syn_timeout: SYNs dropped (iptables --syn DROP). A connect that saw a SYN
// retry before the deadline; one aborted before the first retry (no proof
// of loss yet: unknown); one that timed out in the kernel and was retried.
func synTimeoutScenario() *scenario {
	sc := newScenario("syn_timeout", "SYN blackhole: SYN retries, an abort before the first retry, a connect ETIMEDOUT and its retry")
	a := sc.conn(0x2001, 4300, "labapp", "10.213.0.1:50000", "10.213.0.2:8081", 0)
	a.bind(1000.01, 61, event.BindDial)
	a.tcp(1000.02, event.TCPConnect)
	a.tcp(2020, event.TCPSynRetransmit, rto(time.Second, 0), retrans(1))
	a.tcp(3500.3, event.TCPConnectAborted, state(closed), oldState(synSent), retrans(1))
	sc.deadline(4300, "labapp", 1000, 2500, 61, at)

	b := sc.conn(0x2002, 4300, "labapp", "10.213.0.1:50002", "10.213.0.2:8081", 0)
	b.bind(6000.01, 62, event.BindDial)
	b.tcp(6000.02, event.TCPConnect)
	b.tcp(6500.2, event.TCPConnectAborted, state(closed), oldState(synSent))
	sc.deadline(4300, "labapp", 6000, 500, 62, at)

	// net.ipv4.tcp_syn_retries=2: retries at 1 s and 3 s, ETIMEDOUT at 7 s.
	c := sc.conn(0x2003, 4300, "labapp", "10.213.0.1:50004", "10.213.0.2:8081", 0)
	c.bind(10000.01, 63, event.BindDial)
	c.tcp(10000.02, event.TCPConnect)
	c.tcp(11020, event.TCPSynRetransmit, rto(time.Second, 0), retrans(1))
	c.tcp(13020, event.TCPSynRetransmit, rto(2*time.Second, 1), retrans(2))
	c.tcp(17020, event.TCPConnectFailed, state(closed), oldState(synSent), errno(syscall.ETIMEDOUT), retrans(2))
	d := sc.conn(0x2004, 4300, "labapp", "10.213.0.1:50006", "10.213.0.2:8081", 0)
	d.bind(17021, 63, event.BindDial)
	d.tcp(17021.01, event.TCPConnect)
	d.tcp(18041, event.TCPSynRetransmit, rto(time.Second, 0), retrans(1))
	d.tcp(20000.3, event.TCPConnectAborted, state(closed), oldState(synSent), retrans(1))
	sc.deadline(4300, "labapp", 10000, 10000, 63, at)
	return sc
}

// reset: REJECT --reject-with tcp-reset on the server: the request's
// connection is reset, the client's redials are refused until its deadline.
func resetScenario() *scenario {
	sc := newScenario("reset", "REJECT with tcp-reset: the request's connection is reset, redials refused")
	a := sc.conn(0x3001, 4400, "labapp", "10.213.0.1:43000", "10.213.0.2:8082", 120*time.Microsecond)
	a.handshake(0, 70)
	a.act(0.3, 70, true)
	a.bind(1000.01, 71, event.BindHTTPRoundTrip)
	a.act(1000.02, 71, true)
	a.tcp(1000.3, event.TCPResetReceived)
	a.tcp(1000.31, event.TCPSocketError, state(closed), errno(syscall.ECONNRESET))
	a.tcp(1000.32, event.TCPClose, oldState(established))
	for i, t := range []float64{1001, 1101, 1301} {
		sc.conn(0x3002+uint64(i), 4400, "labapp", fmt.Sprintf("10.213.0.1:%d", 43002+2*i), "10.213.0.2:8082", 0).refusedConnect(t, 71)
	}
	sc.deadline(4400, "labapp", 1000, 500, 71, at)
	return sc
}

// refused: nothing listening; the client's dial loop retries until its
// deadline. The second deadline has no detail: every candidate socket of
// the process was refused, so the class stands, with confidence ambiguous.
func refusedScenario() *scenario {
	sc := newScenario("refused", "nothing listening: a dial retry loop, with and without detail")
	cookie := uint64(0x4001)
	loop := func(goid uint64, start float64) {
		for _, off := range []float64{0, 50, 150, 350} {
			sc.conn(cookie, 4500, "labapp", fmt.Sprintf("10.213.0.1:%d", 44000+cookie-0x4001), "10.213.0.2:9090", 0).refusedConnect(start+off, goid)
			cookie++
		}
	}
	loop(81, 1000)
	sc.deadline(4500, "labapp", 1000, 400, 81, at)
	loop(82, 5000)
	sc.deadline(4500, "labapp", 5000, 400, 82, at, noDetail())
	return sc
}

// zero_window: the server stops reading; the client's upload stalls on a
// closed window while the zero-window probe timer backs off. Bound by
// activity samples that name the goroutine (no call probe).
func zeroWindowScenario() *scenario {
	sc := newScenario("zero_window", "receiver stops reading: zero-window probes back off during an upload")
	a := sc.conn(0x5001, 4600, "labapp", "10.213.0.1:45000", "10.213.0.2:8083", 150*time.Microsecond)
	a.handshake(0, 90)
	a.actTCP(1000.1, 91, true)
	for i, t := range []float64{1204, 1612, 2428} {
		a.tcp(t, event.TCPZeroWindow, sndWnd(0), rto(time.Duration(204<<i)*time.Millisecond, uint8(i)))
	}
	a.actTCP(2000.2, 91, true)
	sc.deadline(4600, "labapp", 1000, 1500, 91, at)
	return sc
}

// fast_retransmit: 2 % random loss on a bulk transfer: losses repaired by
// fast recovery (and one by RACK), no timer.
func fastRetransmitScenario() *scenario {
	sc := newScenario("fast_retransmit", "2% random loss on a bulk transfer: fast retransmits")
	a := sc.conn(0x6001, 4700, "labapp", "10.213.0.1:46000", "10.213.0.2:8084", 1200*time.Microsecond)
	a.handshake(0, 95)
	a.bind(1000.01, 95, event.BindKernelG)
	for t := 1000.0; t < 1600; t += 100 {
		a.act(t, 95, true)
	}
	for _, t := range []float64{1010, 1032, 1100, 1180, 1260, 1300, 1410} {
		a.tcp(t, event.TCPFastRetransmit)
	}
	a.tcp(1350, event.TCPRetransmit)
	a.bind(1400, 95, event.BindKernelG)
	sc.deadline(4700, "labapp", 1000, 500, 95, at)
	return sc
}

// tlp: a request whose tail segment was lost and repaired by a loss probe.
func tlpScenario() *scenario {
	sc := newScenario("tlp", "tail loss probe during a short-deadline request")
	a := sc.conn(0x7001, 4800, "labapp", "10.213.0.1:47000", "10.213.0.2:8085", 90*time.Microsecond)
	a.handshake(0, 97)
	a.bind(1000.01, 97, event.BindHTTPRoundTrip)
	a.act(1000.02, 97, true)
	a.tcp(1200.3, event.TCPTLP)
	sc.deadline(4800, "labapp", 1000, 250, 97, at)
	return sc
}

// slow_peer: the server handler sleeps past the deadline. The request was
// sent on a healthy connection; the client's close makes the server's late
// answer bounce (a reset sent, after the expiry: no cause). The second
// deadline has no detail: the single socket in use makes it probable.
func slowPeerScenario() *scenario {
	sc := newScenario("slow_peer", "server sleeps past the deadline on a healthy connection")
	a := sc.conn(0x8001, 4900, "labapp", "10.213.0.1:48000", "10.213.0.3:8080", 95*time.Microsecond)
	a.handshake(0, 100)
	a.act(0.3, 100, true)
	a.bind(1000.01, 101, event.BindHTTPRoundTrip)
	a.act(1000.02, 101, true)
	a.tcp(1450, event.TCPResetSent, state(finWait1))
	a.tcp(1450.1, event.TCPClose, oldState(finWait1))
	sc.deadline(4900, "labapp", 1000, 300, 101, at)
	// Over 10 s later, without detail: the lookback sees only the new socket.
	b := sc.conn(0x8002, 4900, "labapp", "10.213.0.1:48002", "10.213.0.3:8080", 95*time.Microsecond)
	b.handshake(11999, 102)
	b.bind(12000.01, 102, event.BindHTTPRoundTrip)
	b.act(12000.02, 102, true)
	sc.deadline(4900, "labapp", 12000, 300, 102, at, noDetail())
	return sc
}

// local: deadlines that expire while waiting on a semaphore. In pid 5000
// the process is quiet in the window (activity before and after); in pid
// 5050 other requests keep a lossy connection busy, but the call probes
// bound none to the waiting goroutine: local, not rto.
func localScenario() *scenario {
	sc := newScenario("local", "semaphore waits: a quiet process, an expired-at-creation deadline, and a busy lossy one")
	a := sc.conn(0x9001, 5000, "labapp", "10.213.0.1:49000", "10.213.0.2:8080", 100*time.Microsecond)
	a.handshake(0, 0) // no call probe: the verdict comes from activity alone
	a.act(0.2, 111, true)
	a.act(1000, 111, false)
	sc.deadline(5000, "labapp", 5000, 300, 112, at)
	a.act(8000, 111, true)
	sc.deadline(5000, "labapp", 9500, 0, 113, at, expiredAtCreation())

	l := sc.conn(0x9101, 5050, "labapp", "10.213.0.1:49100", "10.213.0.2:8080", 100*time.Microsecond)
	l.handshake(11000, 120)
	for i, t := range []float64{12000, 12100, 12200} {
		goid := uint64(121 + i)
		l.bind(t, goid, event.BindHTTPRoundTrip)
		l.act(t+0.02, goid, true)
	}
	l.blackhole(12000.02, 13000)
	sc.deadline(5050, "labapp", 12000, 500, 121, at)
	sc.deadline(5050, "labapp", 12050, 500, 130, "main.acquire (/src/labapp/pool.go:31)")
	return sc
}

// unknown: a process the kernel side knows nothing about, and one whose
// only TCP events are long before the window and whose activity is not
// traced (no activity producer): nothing can be said.
func unknownScenario() *scenario {
	sc := newScenario("unknown", "no binding and no activity")
	sc.deadline(5300, "other", 1000, 300, 0, "", noDetail())
	a := sc.conn(0xb001, 5301, "other", "10.213.0.1:51000", "10.213.0.2:8080", 100*time.Microsecond)
	a.tcp(0, event.TCPTLP)
	a.tcp(204, event.TCPRTO, rto(204*time.Millisecond, 0), retrans(1))
	sc.deadline(5301, "other", 20000, 300, 141, at)
	return sc
}

// ambiguous: no detail, several sockets in use. Different troubles: unknown.
// The same trouble on all: that class. One lossy among healthy: unknown —
// never the lossy one's cause.
func ambiguousScenario() *scenario {
	sc := newScenario("ambiguous", "several candidate sockets without a binding")
	a := sc.conn(0xc001, 5400, "labapp", "10.213.0.1:52000", "10.213.0.2:8080", 100*time.Microsecond)
	b := sc.conn(0xc002, 5400, "labapp", "10.213.0.1:52002", "10.213.0.4:5432", 300*time.Microsecond)
	a.act(1000, 151, true)
	a.blackhole(1000, 1700)
	b.act(1100, 152, true)
	b.tcp(1500, event.TCPZeroWindow, sndWnd(0))
	sc.deadline(5400, "labapp", 1000, 1000, 0, "", noDetail())

	c := sc.conn(0xc101, 5500, "labapp", "10.213.0.1:52100", "10.213.0.2:8080", 100*time.Microsecond)
	d := sc.conn(0xc102, 5500, "labapp", "10.213.0.1:52102", "10.213.0.5:8080", 200*time.Microsecond)
	c.act(3000, 161, true)
	c.blackhole(3000, 3700)
	d.act(3100, 162, true)
	d.blackhole(3100, 3600)
	sc.deadline(5500, "labapp", 3000, 1000, 0, "", noDetail())

	e := sc.conn(0xc201, 5600, "labapp", "10.213.0.1:52200", "10.213.0.2:8080", 100*time.Microsecond)
	f := sc.conn(0xc202, 5600, "labapp", "10.213.0.1:52202", "10.213.0.3:8080", 100*time.Microsecond)
	e.act(6000, 171, true)
	e.blackhole(6000, 6900)
	f.act(6000.5, 172, true)
	sc.deadline(5600, "labapp", 6000, 1000, 0, "", noDetail())
	return sc
}

// mixed: one client, two backends at once — 10.213.0.3 sleeps past every
// deadline, 10.213.0.2 drops half its packets. Requests alternate, each on
// its own goroutine with a 300 ms deadline, bound by the HTTP round-trip
// probe. Before the detail probes attach, two deadlines come without
// detail; a semaphore waiter times out too.
func mixedScenario() *scenario {
	sc := newScenario("mixed", "one client, a slow and a lossy backend at once, with exact bindings")
	const pid = 6000
	lossy := []*conn{
		sc.conn(0xd101, pid, "labapp", "10.213.0.1:53100", "10.213.0.2:8080", 100*time.Microsecond),
		sc.conn(0xd102, pid, "labapp", "10.213.0.1:53102", "10.213.0.2:8080", 100*time.Microsecond),
	}
	for i, c := range lossy {
		c.handshake(float64(i), 190)
	}
	cookie := uint64(0xd001)
	slowConn := func(ms float64, goid uint64) *conn {
		c := sc.conn(cookie, pid, "labapp", fmt.Sprintf("10.213.0.1:%d", 53000+2*(cookie-0xd001)), "10.213.0.3:8080", 95*time.Microsecond)
		cookie++
		c.handshake(ms, goid)
		return c
	}
	request := func(i int, ms float64, detail bool) {
		goid := uint64(200 + i)
		var opts []dlOpt
		if !detail {
			opts = append(opts, noDetail())
		}
		if i%2 == 0 { // the slow backend: a fresh connection each time (the last one was closed at its timeout)
			c := slowConn(ms, goid)
			c.bind(ms+0.3, goid, event.BindHTTPRoundTrip)
			c.act(ms+0.35, goid, true)
			c.tcp(ms+300.6, event.TCPClose, oldState(finWait1))
			sc.deadline(pid, "labapp", ms, 300, goid, "main.callSlow (/src/labapp/main.go:61)", opts...)
			return
		}
		c := lossy[(i/2)%2]
		c.bind(ms+0.01, goid, event.BindHTTPRoundTrip)
		c.act(ms+0.02, goid, true)
		c.tcp(ms+200.3, event.TCPTLP)
		c.tcp(ms+404.5, event.TCPRTO, rto(204*time.Millisecond, 0), retrans(1))
		sc.deadline(pid, "labapp", ms, 300, goid, "main.callLossy (/src/labapp/main.go:74)", opts...)
	}
	request(0, 500, false)
	request(1, 600, false)
	for i := 2; i < 22; i++ {
		request(i, 1000+100*float64(i), true)
	}
	sc.deadline(pid, "labapp", 2000, 300, 300, "main.acquire (/src/labapp/pool.go:31)")
	return sc
}

// detailless: the cold path alone (no creation, no goroutine): approximate
// windows of the lookback before each expiry.
func detaillessScenario() *scenario {
	sc := newScenario("detailless", "cold-path deadlines only: approximate windows")
	a := sc.conn(0xe001, 7000, "labapp", "10.213.0.1:54000", "10.213.0.2:8080", 100*time.Microsecond)
	a.handshake(0, 0)
	a.act(0.3, 0, true)
	a.act(12000, 0, true)
	a.blackhole(12000, 13500)
	sc.deadline(7000, "labapp", 12000, 1500, 0, "", noDetail())

	b := sc.conn(0xe101, 7100, "labapp", "10.213.0.1:54100", "10.213.0.3:8080", 95*time.Microsecond)
	b.handshake(11000, 0)
	b.act(12000, 0, true)
	sc.deadline(7100, "labapp", 12000, 800, 0, "", noDetail())

	c := sc.conn(0xe201, 7200, "labapp", "10.213.0.1:54200", "10.213.0.3:8080", 95*time.Microsecond)
	c.handshake(0, 0)
	c.act(0.3, 0, true)
	sc.deadline(7200, "labapp", 15000, 300, 0, "", noDetail())
	return sc
}

// local_causes: the process itself lost the time. A request on a healthy
// connection in a cgroup throttled 60 ms of every 100 ms (cpu_throttled,
// not slow_peer); a local wait while the threads waited for a CPU half of
// the time (runqueue_delay, not local); three 40 ms stop-the-world pauses
// inside a 200 ms budget (gc_pause); a real RTO under the same throttling
// (rto stays: the rule never steals a network failure); a slow peer with
// light throttling, 5 ms per 100 ms (slow_peer stays, figures attached); a
// deadline whose creation was not seen, under heavy throttling (the
// lookback window); and run-queue delay beside a smaller GC figure (the
// class names the larger).
func localCausesScenario() *scenario {
	sc := newScenario("local_causes", "cgroup throttling, run-queue waits and GC pauses, against healthy, local and lossy requests")
	a := sc.conn(0xc001, 6000, "labapp", "10.213.0.1:52000", "10.213.0.2:8080", 90*time.Microsecond)
	a.handshake(0, 150)
	sc.sampled(6000, event.LocalThrottled, 0, 2000, 100, 60, 1)
	a.bind(1000.01, 151, event.BindHTTPRoundTrip)
	a.act(1000.02, 151, true)
	sc.deadline(6000, "labapp", 1000, 300, 151, at)

	b := sc.conn(0xc101, 6100, "labapp", "10.213.0.1:52100", "10.213.0.2:8080", 90*time.Microsecond)
	b.handshake(0, 0)
	b.act(0.2, 160, true)
	sc.sampled(6100, event.LocalRunqueue, 0, 2500, 100, 50, 3)
	sc.deadline(6100, "labapp", 2000, 250, 161, "main.acquire (/src/labapp/pool.go:31)")

	g := sc.conn(0xc201, 6200, "labapp", "10.213.0.1:52200", "10.213.0.2:8080", 90*time.Microsecond)
	g.handshake(0, 0)
	g.act(0.2, 170, true)
	sc.local(6200, event.LocalRunqueue, 0, 3000, 1, 1) // a watching run-queue source, nearly idle
	for _, t := range []float64{3010, 3080, 3150} {
		sc.local(6200, event.LocalGCPause, t, t+40, 40, 1)
	}
	sc.deadline(6200, "labapp", 3000, 200, 171, "main.acquire (/src/labapp/pool.go:31)")

	r := sc.conn(0xc301, 6300, "labapp", "10.213.0.1:52300", "10.213.0.2:8080", 81*time.Microsecond)
	r.handshake(3900, 180)
	sc.sampled(6300, event.LocalThrottled, 3900, 6500, 100, 60, 1)
	r.bind(4000.02, 181, event.BindHTTPRoundTrip)
	r.act(4000.05, 181, true)
	r.blackhole(4000.05, 6000)
	sc.deadline(6300, "labapp", 4000, 1500, 181, at)

	l := sc.conn(0xc401, 6400, "labapp", "10.213.0.1:52400", "10.213.0.3:8080", 95*time.Microsecond)
	l.handshake(6900, 190)
	sc.sampled(6400, event.LocalThrottled, 6900, 8000, 100, 5, 1)
	l.bind(7000.01, 191, event.BindHTTPRoundTrip)
	l.act(7000.02, 191, true)
	sc.deadline(6400, "labapp", 7000, 300, 191, at)

	n := sc.conn(0xc501, 6500, "labapp", "10.213.0.1:52500", "10.213.0.3:8080", 95*time.Microsecond)
	n.handshake(8000, 200)
	sc.sampled(6500, event.LocalThrottled, 8000, 10000, 250, 150, 1)
	n.bind(9000.01, 201, event.BindHTTPRoundTrip)
	n.act(9000.02, 201, true)
	sc.deadline(6500, "labapp", 9000, 300, 201, at, noDetail())

	m := sc.conn(0xc601, 6600, "labapp", "10.213.0.1:52600", "10.213.0.3:8080", 95*time.Microsecond)
	m.handshake(10000, 0)
	m.act(10000.2, 210, true)
	sc.sampled(6600, event.LocalRunqueue, 10000, 12000, 100, 55, 2) // past LocalOverPeer: its network verdict is slow_peer
	sc.local(6600, event.LocalGCPause, 11100, 11190, 90, 1)
	sc.deadline(6600, "labapp", 11000, 400, 211, "main.acquire (/src/labapp/pool.go:31)")

	// The scheduler hooks were detached long before this deadline (they
	// follow the detail tier): its run-queue figure is unknown (null), not 0,
	// and the old waits do not count.
	q := sc.conn(0xc701, 6700, "labapp", "10.213.0.1:52700", "10.213.0.3:8080", 95*time.Microsecond)
	q.handshake(12000, 0)
	q.act(12000.2, 220, true)
	sc.sampled(6700, event.LocalRunqueue, 12000, 13000, 100, 60, 2)
	sc.deadline(6700, "labapp", 16000, 300, 221, "main.acquire (/src/labapp/pool.go:31)")

	// A starved client on a healthy connection: its threads waited for a
	// CPU 40 % of the time (under LocalOverPeer), and its 30 ms timer fired
	// 200 ms late: runqueue_delay, not slow_peer. The same figures with a
	// timer on time leave slow_peer standing.
	st := sc.conn(0xc801, 6800, "labapp", "10.213.0.1:52800", "10.213.0.3:8080", 95*time.Microsecond)
	st.handshake(17900, 230)
	sc.sampled(6800, event.LocalRunqueue, 17900, 18500, 100, 40, 2)
	st.bind(18000.01, 231, event.BindHTTPRoundTrip)
	st.act(18000.02, 231, true)
	sc.deadline(6800, "labapp", 18000, 30, 231, at, firedLate(200))

	ot := sc.conn(0xc901, 6900, "labapp", "10.213.0.1:52900", "10.213.0.3:8080", 95*time.Microsecond)
	ot.handshake(19900, 240)
	sc.sampled(6900, event.LocalRunqueue, 19900, 20500, 100, 40, 2)
	ot.bind(20000.01, 241, event.BindHTTPRoundTrip)
	ot.act(20000.02, 241, true)
	sc.deadline(6900, "labapp", 20000, 230, 241, at)
	return sc
}
