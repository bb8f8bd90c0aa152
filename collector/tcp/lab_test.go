package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/gobin"
	"github.com/timeout-tracer/tracer/lab/netlab"
	"github.com/timeout-tracer/tracer/lab/testenv"
	"github.com/timeout-tracer/tracer/lab/testprog"
	"github.com/timeout-tracer/tracer/workload"
)

// These tests make real traffic between two network namespaces, inject real
// faults with iptables and check what the attached collector reports. They
// need root and a kernel with BTF; elsewhere they skip with the reason.

const labPort = 8080

// requireTracing is the one skip helper of the kernel tests.
func requireTracing(t *testing.T) {
	t.Helper()
	testenv.Root(t)
	if err := collector.Preflight(); err != nil {
		t.Skipf("kernel tracing unavailable: %v", err)
	}
}

func startCollector(t *testing.T, cfg Config) *Collector {
	t.Helper()
	if cfg.RateBurst == 0 {
		cfg.RateBurst = 100000
	}
	cfg.PollInterval = 20 * time.Millisecond
	c, err := Start(cfg)
	if err != nil {
		t.Fatalf("start collector: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close collector: %v", err)
		}
	})
	return c
}

// collect gathers the events of one connection (by local port and peer)
// until done says enough or the timeout passes.
func collect(t *testing.T, c *Collector, local, peer netip.AddrPort, timeout time.Duration, done func([]event.TCP) bool) []event.TCP {
	t.Helper()
	var got []event.TCP
	deadline := time.After(timeout)
	for {
		if done != nil && done(got) {
			return got
		}
		select {
		case ev, ok := <-c.Events():
			if !ok {
				t.Fatal("event channel closed")
			}
			if (local.IsValid() && ev.Local != local) || ev.Peer != peer {
				continue
			}
			got = append(got, ev)
		case <-deadline:
			return got
		}
	}
}

func count(evs []event.TCP, k event.TCPKind) int {
	n := 0
	for _, e := range evs {
		if e.Kind == k {
			n++
		}
	}
	return n
}

func ofKind(evs []event.TCP, k event.TCPKind) []event.TCP {
	var out []event.TCP
	for _, e := range evs {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func kinds(evs []event.TCP) string {
	var s []string
	for _, e := range evs {
		s = append(s, fmt.Sprintf("%s(state=%s backoff=%d rto=%v err=%s)", e.Kind, e.State, e.Backoff, e.RTO, e.ErrnoName()))
	}
	return strings.Join(s, ", ")
}

// serve accepts on the server side and either discards what it reads or,
// with hold, never reads (to close the window).
func serve(t *testing.T, p *netlab.Pair, addr netip.Addr, hold bool) netip.AddrPort {
	t.Helper()
	ap := netip.AddrPortFrom(addr, labPort)
	ln, err := p.Listen("tcp", ap.String())
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if hold {
				t.Cleanup(func() { conn.Close() })
				continue
			}
			go func() {
				defer conn.Close()
				io.Copy(conn, conn) // echo
			}()
		}
	}()
	return ap
}

func addrPort(t *testing.T, a net.Addr) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

func roundTrip(t *testing.T, conn net.Conn) {
	t.Helper()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	msg := []byte("ping")
	if _, err := conn.Write(msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	if _, err := io.ReadFull(conn, make([]byte, len(msg))); err != nil {
		t.Fatalf("read echo: %v", err)
	}
	conn.SetDeadline(time.Time{})
}

// checkRTOs asserts a blackholed connection's RTO series: the timer backs off
// (icsk_backoff grows by one per firing) and the RTO doubles.
//
// A skipped backoff (an RTO firing whose event is missing) passes when the
// collector counted a loss: the kernel's recursion guard (Missed), a full
// ring (Lost) or the rate limit. CI saw 0, 2, 3 once on a busy shared
// machine (stop 25), with no counters to tell why; not reproduced in 35
// runs here, idle and under CPU load. One skipped firing in a series
// passes, logged: tcp_retransmit_timer backs off even when its retransmit
// fails, and a retransmit refused before the tracepoint leaves no event to
// count (the patch that gave tcp_retransmit_skb its err field kept the
// first -EAGAIN, send buffer accounting, ahead of it; not checked on this
// kernel). Two, or a skip of more than one, fail: a hook that misses
// firings as a rule.
func checkRTOs(t *testing.T, c *Collector, evs []event.TCP, min int) {
	t.Helper()
	rtos := ofKind(evs, event.TCPRTO)
	if len(rtos) < min {
		t.Fatalf("%d rto events, want >= %d; got: %s", len(rtos), min, kinds(evs))
	}
	silent := 0
	for i := 1; i < len(rtos); i++ {
		if gap := int(rtos[i].Backoff) - int(rtos[i-1].Backoff); gap != 1 {
			st, err := c.Stats()
			counted := err == nil && gap > 1 && st.Missed+st.Lost+st.RateLimited > 0
			if !counted && gap == 2 && silent == 0 {
				silent++
				t.Logf("backoff %d after %d: one firing without an event and no loss counted (stats %+v): %s", rtos[i].Backoff, rtos[i-1].Backoff, st, kinds(evs))
			} else if counted {
				t.Logf("backoff %d after %d: %d firing(s) missing, counted by the collector (%+v): %s", rtos[i].Backoff, rtos[i-1].Backoff, gap-1, st, kinds(evs))
			} else {
				t.Errorf("backoff %d after %d, want +1 per RTO (stats %+v, err %v): %s", rtos[i].Backoff, rtos[i-1].Backoff, st, err, kinds(evs))
			}
		}
		if rtos[i].RTO < rtos[i-1].RTO {
			t.Errorf("rto shrank from %v to %v", rtos[i-1].RTO, rtos[i].RTO)
		}
		if rtos[i].Retransmits <= rtos[i-1].Retransmits {
			t.Errorf("retransmits %d after %d, want growing", rtos[i].Retransmits, rtos[i-1].Retransmits)
		}
	}
	if last, first := rtos[len(rtos)-1].RTO, rtos[0].RTO; last < 2*first {
		t.Errorf("rto went %v -> %v, want at least doubled", first, last)
	}
	for _, e := range rtos {
		if e.State != 1 || e.CAState.String() != "loss" || e.SRTT <= 0 || e.Cookie == 0 {
			t.Errorf("rto snapshot wrong: %+v", e)
		}
	}
}

// TestRTOOwnedByOtherProcess: a blackhole after the handshake gives rto
// events with growing backoff, attributed to the client process (not the
// tracer, not whatever task the timer interrupted), with the right 4-tuple.
func TestRTOOwnedByOtherProcess(t *testing.T) {
	requireTracing(t)
	p := netlab.NewPair(t)
	srv := serve(t, p, p.ServerAddr, false)
	c := startCollector(t, Config{})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := p.ClientCmd(ctx, testprog.Path(t, "tcpclient"), "-addr", srv.String(), "-every", "50ms", "-duration", "20s")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cancel()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("client did not connect: %v", err)
	}
	local := netip.MustParseAddrPort(strings.TrimSpace(strings.TrimPrefix(line, "connected ")))
	time.Sleep(200 * time.Millisecond) // healthy sends first
	if err := p.Blackhole(labPort); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, c, local, srv, 8*time.Second, func(e []event.TCP) bool { return count(e, event.TCPRTO) >= 3 })
	checkRTOs(t, c, evs, 3)
	for _, e := range evs {
		if int(e.PID) != cmd.Process.Pid || e.Comm != "tcpclient" {
			t.Fatalf("event owned by pid %d %q, want the client %d: %+v", e.PID, e.Comm, cmd.Process.Pid, e)
		}
		if e.Local != local || e.Peer != srv {
			t.Fatalf("4-tuple %s -> %s, want %s -> %s", e.Local, e.Peer, local, srv)
		}
	}
	if n := count(evs, event.TCPFastRetransmit); n != 0 {
		t.Errorf("%d fast retransmits on a blackholed connection", n)
	}
}

// TestRTOIPv6 is the RTO case over IPv6, with the collector filtered to
// this process.
func TestRTOIPv6(t *testing.T) {
	requireTracing(t)
	p := netlab.NewPair(t)
	srv := serve(t, p, p.ServerAddr6, false)
	c := startCollector(t, Config{PID: uint32(os.Getpid())})
	conn, err := p.Dial(context.Background(), "tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, conn)
	if err := p.Blackhole(labPort); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	local := addrPort(t, conn.LocalAddr())
	evs := collect(t, c, local, srv, 6*time.Second, func(e []event.TCP) bool { return count(e, event.TCPRTO) >= 3 })
	checkRTOs(t, c, evs, 3)
	if !local.Addr().Is6() || evs[0].PID != uint32(os.Getpid()) {
		t.Errorf("want IPv6 events owned by this process: %+v", evs[0])
	}
}

// TestPreexistingSocketAttributedAfterSend: a socket opened before the
// collector started is attributed to its owner after its next send.
func TestPreexistingSocketAttributedAfterSend(t *testing.T) {
	requireTracing(t)
	p := netlab.NewPair(t)
	srv := serve(t, p, p.ServerAddr, false)
	conn, err := p.Dial(context.Background(), "tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, conn)
	c := startCollector(t, Config{PID: uint32(os.Getpid())})
	if err := p.Blackhole(labPort); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, c, addrPort(t, conn.LocalAddr()), srv, 6*time.Second, func(e []event.TCP) bool { return count(e, event.TCPRTO) >= 2 })
	if count(evs, event.TCPRTO) < 2 {
		t.Fatalf("pre-existing socket: got %s", kinds(evs))
	}
	for _, e := range evs {
		if e.PID != uint32(os.Getpid()) {
			t.Fatalf("owner %d, want %d", e.PID, os.Getpid())
		}
	}
}

// TestFastRetransmitUnderLoss: 2% loss on a bulk transfer gives fast
// retransmits, and rto events exactly when the kernel's own counter says an
// RTO fired.
func TestFastRetransmitUnderLoss(t *testing.T) {
	requireTracing(t)
	p := netlab.NewPair(t)
	srv := serve(t, p, p.ServerAddr, false)
	c := startCollector(t, Config{PID: uint32(os.Getpid())})
	conn, err := p.Dial(context.Background(), "tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, conn) // drain the echo
	if err := p.Loss(labPort, 0.02); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64*1024)
	conn.SetWriteDeadline(time.Now().Add(15 * time.Second))
	for sent := 0; sent < 16<<20; sent += len(buf) {
		if _, err := conn.Write(buf); err != nil {
			t.Fatalf("bulk write: %v", err)
		}
	}
	info := waitAcked(t, conn)
	// The events wait in the collector's channel (4096 deep) meanwhile.
	evs := collect(t, c, addrPort(t, conn.LocalAddr()), srv, 500*time.Millisecond, nil)
	fast, rto := count(evs, event.TCPFastRetransmit), count(evs, event.TCPRTO)
	t.Logf("kernel: %d segments retransmitted, %d RTOs; tracer: %d fast_retransmit, %d rto, %d tlp, %d other",
		info.Total_retrans, info.Total_rto, fast, rto, count(evs, event.TCPTLP), count(evs, event.TCPRetransmit))
	if fast == 0 {
		t.Fatalf("no fast_retransmit under 2%% loss: %s", kinds(evs))
	}
	if (info.Total_rto == 0) != (rto == 0) {
		t.Errorf("kernel counted %d RTOs, tracer saw %d rto events", info.Total_rto, rto)
	}
	for _, e := range ofKind(evs, event.TCPFastRetransmit) {
		if e.CAState.String() != "recovery" || e.PID != uint32(os.Getpid()) {
			t.Errorf("fast retransmit snapshot wrong: %+v", e)
		}
	}
	// The writes go on after each repair: a send that finds everything
	// up to the last retransmit acknowledged says so, once per repair,
	// and only after a retransmit.
	acked, retx := 0, 0
	for _, e := range evs {
		switch {
		case e.Kind == event.TCPRetransmitAcked:
			if retx == 0 {
				t.Errorf("retransmit_acked with no retransmit before it: %s", kinds(evs))
			}
			acked++
		case e.Kind.Retransmit():
			retx++
		}
	}
	if acked == 0 || acked > retx {
		t.Errorf("%d retransmit_acked for %d retransmits", acked, retx)
	}
	if n := len(evs) - acked; uint32(n) > info.Total_retrans {
		t.Errorf("%d retransmit events for %d retransmitted segments", n, info.Total_retrans)
	}
}

// TestSYNBlackhole: dropped SYNs give syn_retransmit events, then
// connect_failed with ETIMEDOUT, all on one socket.
func TestSYNBlackhole(t *testing.T) {
	requireTracing(t)
	p := netlab.NewPair(t)
	srv := serve(t, p, p.ServerAddr, false)
	if err := p.Sysctl(p.ClientNS, "net.ipv4.tcp_syn_retries", "1"); err != nil {
		t.Fatal(err)
	}
	if err := p.DropSYN(labPort); err != nil {
		t.Fatal(err)
	}
	c := startCollector(t, Config{PID: uint32(os.Getpid())})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := p.Dial(ctx, "tcp", srv.String()); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("dial error %v, want ETIMEDOUT", err)
	}
	evs := collect(t, c, netip.AddrPort{}, srv, 3*time.Second, func(e []event.TCP) bool { return count(e, event.TCPConnectFailed) > 0 })
	syns := ofKind(evs, event.TCPSynRetransmit)
	failed := ofKind(evs, event.TCPConnectFailed)
	if len(syns) == 0 || len(failed) != 1 {
		t.Fatalf("want syn_retransmit then one connect_failed, got %s", kinds(evs))
	}
	if failed[0].Errno != syscall.ETIMEDOUT || failed[0].State.String() != "CLOSE" || failed[0].OldState.String() != "SYN_SENT" {
		t.Errorf("connect_failed: %+v", failed[0])
	}
	for _, e := range syns {
		if e.Cookie != failed[0].Cookie || e.State.String() != "SYN_SENT" || e.Mono > failed[0].Mono {
			t.Errorf("syn_retransmit not before the failure on the same socket: %+v", e)
		}
	}
	if n := count(evs, event.TCPRTO); n != 0 {
		t.Errorf("SYN retries read as %d RTOs", n)
	}
}

// TestResetReceived: a RST on an established connection is reported, with
// the ECONNRESET the socket dies with.
func TestResetReceived(t *testing.T) {
	requireTracing(t)
	p := netlab.NewPair(t)
	srv := serve(t, p, p.ServerAddr, false)
	c := startCollector(t, Config{PID: uint32(os.Getpid())})
	conn, err := p.Dial(context.Background(), "tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, conn)
	if err := p.RejectReset(labPort); err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("after the reject rule"))
	evs := collect(t, c, addrPort(t, conn.LocalAddr()), srv, 5*time.Second, func(e []event.TCP) bool {
		return count(e, event.TCPResetReceived) > 0 && count(e, event.TCPSocketError) > 0
	})
	rst := ofKind(evs, event.TCPResetReceived)
	if len(rst) != 1 || rst[0].State.String() != "ESTABLISHED" || rst[0].PID != uint32(os.Getpid()) {
		t.Fatalf("want one reset_received in ESTABLISHED, got %s", kinds(evs))
	}
	if se := ofKind(evs, event.TCPSocketError); len(se) != 1 || se[0].Errno != syscall.ECONNRESET {
		t.Errorf("want socket_error ECONNRESET, got %s", kinds(evs))
	}
}

// TestConnectRefused: nothing listening gives connect_failed ECONNREFUSED.
func TestConnectRefused(t *testing.T) {
	requireTracing(t)
	p := netlab.NewPair(t)
	c := startCollector(t, Config{PID: uint32(os.Getpid())})
	closed := netip.AddrPortFrom(p.ServerAddr, 9)
	if _, err := p.Dial(context.Background(), "tcp", closed.String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial error %v, want ECONNREFUSED", err)
	}
	evs := collect(t, c, netip.AddrPort{}, closed, 3*time.Second, func(e []event.TCP) bool { return count(e, event.TCPConnectFailed) > 0 })
	failed := ofKind(evs, event.TCPConnectFailed)
	if len(failed) != 1 || failed[0].Errno != syscall.ECONNREFUSED || failed[0].PID != uint32(os.Getpid()) {
		t.Fatalf("want connect_failed ECONNREFUSED, got %s", kinds(evs))
	}
}

// TestHealthyTrafficIsQuiet: round trips on a clean link give no event at
// all (lifecycle events off).
func TestHealthyTrafficIsQuiet(t *testing.T) {
	requireTracing(t)
	p := netlab.NewPair(t)
	srv := serve(t, p, p.ServerAddr, false)
	c := startCollector(t, Config{PID: uint32(os.Getpid())})
	conn, err := p.Dial(context.Background(), "tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		roundTrip(t, conn)
	}
	if evs := collect(t, c, addrPort(t, conn.LocalAddr()), srv, time.Second, nil); len(evs) != 0 {
		t.Fatalf("healthy connection produced events: %s", kinds(evs))
	}
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.OwnerHits == 0 {
		t.Error("no process-context hook ran during 200 round trips")
	}
}

// TestLifecycleEvents: with lifecycle on, connect, established, closing
// (this side's close) and close bracket a connection.
func TestLifecycleEvents(t *testing.T) {
	requireTracing(t)
	p := netlab.NewPair(t)
	srv := serve(t, p, p.ServerAddr, false)
	c := startCollector(t, Config{PID: uint32(os.Getpid()), Lifecycle: true})
	conn, err := p.Dial(context.Background(), "tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, conn)
	local := addrPort(t, conn.LocalAddr())
	conn.Close()
	evs := collect(t, c, netip.AddrPort{}, srv, 3*time.Second, func(e []event.TCP) bool { return count(e, event.TCPClose) > 0 })
	if count(evs, event.TCPConnect) != 1 || count(evs, event.TCPEstablished) != 1 || count(evs, event.TCPClosing) != 1 || count(evs, event.TCPClose) != 1 {
		t.Fatalf("want connect, established, closing, close; got %s", kinds(evs))
	}
	for i, e := range evs {
		if e.Kind == event.TCPClosing && (e.OldState != 1 || e.State != 4 || i+1 >= len(evs) || evs[len(evs)-1].Kind != event.TCPClose) {
			t.Errorf("closing %s -> %s at %d of %s: want ESTABLISHED -> FIN_WAIT1 before the close", e.OldState, e.State, i, kinds(evs))
		}
	}
	for _, e := range evs[1:] { // connect has no local port yet in some kernels
		if e.Local != local {
			t.Errorf("%s on %s, want %s", e.Kind, e.Local, local)
		}
	}
}

// TestZeroWindow: a server that stops reading closes its window; the
// client's zero-window probe timer is reported.
func TestZeroWindow(t *testing.T) {
	requireTracing(t)
	if addr, _ := collector.KallsymsAddr("tcp_write_timer"); addr == 0 {
		t.Skip("tcp_write_timer not in /proc/kallsyms: zero-window events are off on this kernel")
	}
	p := netlab.NewPair(t)
	srv := serve(t, p, p.ServerAddr, true)
	c := startCollector(t, Config{PID: uint32(os.Getpid())})
	conn, err := p.Dial(context.Background(), "tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 64*1024)
		conn.SetWriteDeadline(time.Now().Add(8 * time.Second))
		for {
			if _, err := conn.Write(buf); err != nil {
				return
			}
		}
	}()
	evs := collect(t, c, addrPort(t, conn.LocalAddr()), srv, 8*time.Second, func(e []event.TCP) bool { return count(e, event.TCPZeroWindow) > 0 })
	zw := ofKind(evs, event.TCPZeroWindow)
	if len(zw) == 0 {
		t.Fatalf("no zero_window event: %s", kinds(evs))
	}
	if zw[0].SndWnd != 0 || zw[0].PID != uint32(os.Getpid()) {
		t.Errorf("zero_window snapshot: %+v", zw[0])
	}
	if n := count(evs, event.TCPRTO); n != 0 {
		t.Errorf("a closed window read as %d RTOs", n)
	}
}

func waitAcked(t *testing.T, conn net.Conn) *unix.TCPInfo {
	t.Helper()
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var info *unix.TCPInfo
		var ierr error
		raw.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
		if ierr != nil {
			t.Fatal(ierr)
		}
		if info.Unacked == 0 && info.Notsent_bytes == 0 {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("data not acked after 20s: %+v", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAcceptedOwner: a server that only reads (tcpsink) never sends, so
// no send hook names it, and the receive hook is attached only with
// goroutine binding. Its accepted sockets get their owner from their
// listener: recorded by the kernel side at listen() when the collector was
// first, adopted from the process (AdoptListeners) when the listener was.
// A reset the server's socket receives must name the server process.
//
// With MPTCP (Go listeners use Multipath TCP by default since Go 1.24;
// when the client speaks MPTCP too) the server reads from the MPTCP socket
// while the kernel's TCP events happen on its subflow, which no
// process-context hook ever sees; the subflow's listener carries the port.
func TestAcceptedOwner(t *testing.T) {
	for _, tc := range []struct {
		name         string
		mptcp, early bool
	}{
		{"tcp/listener after collector", false, false},
		{"tcp/listener before collector", false, true},
		{"mptcp/listener after collector", true, false},
		{"mptcp/listener before collector", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) { acceptedOwner(t, tc.mptcp, tc.early) })
	}
}

func acceptedOwner(t *testing.T, mptcp, early bool) {
	requireTracing(t)
	p := netlab.NewPair(t)
	var c *Collector
	if !early {
		c = startCollector(t, Config{})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := netip.AddrPortFrom(p.ServerAddr, labPort)
	sink := startSink(ctx, t, p, srv)
	if early {
		// Traced as `tracer trace --pid` traces it: only its sockets.
		c = startCollector(t, Config{PID: uint32(sink.Process.Pid)})
		n, err := c.AdoptListeners(uint32(sink.Process.Pid), workload.NewCgroupIDs("").Of(sink.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("adopted %d listeners of tcpsink, want 1", n)
		}
	}
	var conn net.Conn
	err := p.InClient(func() error {
		var d net.Dialer
		d.SetMultipathTCP(mptcp)
		var err error
		conn, err = d.DialContext(ctx, "tcp", srv.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if mp, err := conn.(*net.TCPConn).MultipathTCP(); mptcp && (err != nil || !mp) {
		t.Skipf("kernel did not negotiate MPTCP (%v, %v): nothing to prove here", mp, err)
	}
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the server reads
	local := addrPort(t, conn.LocalAddr())
	conn.(*net.TCPConn).SetLinger(0) // close with a reset
	conn.Close()
	evs := collect(t, c, srv, local, 3*time.Second, func(e []event.TCP) bool { return count(e, event.TCPResetReceived) > 0 })
	rst := ofKind(evs, event.TCPResetReceived)
	if len(rst) == 0 {
		t.Fatalf("want the server's reset_received, got %s", kinds(evs))
	}
	if int(rst[0].PID) != sink.Process.Pid || rst[0].Comm != "tcpsink" {
		t.Errorf("server-side reset owned by pid %d %q, want tcpsink %d", rst[0].PID, rst[0].Comm, sink.Process.Pid)
	}
	// The cgroup id: the kernel's (bpf_get_current_cgroup_id at listen())
	// or the adopted one (the inode of the cgroup v2 directory) agree.
	if want := workload.NewCgroupIDs("").Of(sink.Process.Pid); want == 0 || rst[0].CgroupID != want {
		t.Errorf("reset's cgroup id %d, want %d (the inode of tcpsink's cgroup directory)", rst[0].CgroupID, want)
	}
}

// goid returns the current goroutine's id (from its stack header).
func goid() uint64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	var id uint64
	fmt.Sscanf(string(buf), "goroutine %d ", &id)
	return id
}

// selfGoidOffset is runtime.g.goid's offset in this test binary, for
// RegisterGoProcess.
func selfGoidOffset(t *testing.T) uint32 {
	t.Helper()
	self, err := gobin.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	off, err := self.FieldOffset("runtime.g", "goid")
	if err != nil {
		t.Fatal(err)
	}
	return uint32(off)
}

// goroutineSampling starts the collector for this process, registered as a
// Go process (activity names goroutines) with an hour-long interval, and
// dials the lab's echo server: only takeovers and new directions emit.
func goroutineSampling(t *testing.T) (*Collector, net.Conn, netip.AddrPort) {
	t.Helper()
	requireTracing(t)
	off := selfGoidOffset(t)
	p := netlab.NewPair(t)
	srv := serve(t, p, p.ServerAddr, false)
	c := startCollector(t, Config{PID: uint32(os.Getpid()), ActivityInterval: time.Hour})
	if err := c.RegisterGoProcess(uint32(os.Getpid()), off); err != nil {
		t.Fatal(err)
	}
	conn, err := p.Dial(context.Background(), "tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return c, conn, srv
}

// TestActivityNamesGoroutine: activity events name the socket's owner and,
// for a registered Go process, the goroutine doing the I/O — read from the
// g register of the syscall's user context, no uprobe.
func TestActivityNamesGoroutine(t *testing.T) {
	c, conn, srv := goroutineSampling(t)
	// Two goroutines in turn: each takeover is reported at once, even
	// within the (hour-long) interval.
	ids := make(chan uint64, 2)
	for i := 0; i < 2; i++ {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread() // keep the goroutine on one thread while it writes
			ids <- goid()
			roundTrip(t, conn)
		}()
		<-done
	}
	g1, g2 := <-ids, <-ids
	evs := collect(t, c, addrPort(t, conn.LocalAddr()), srv, 3*time.Second, func(e []event.TCP) bool {
		seen := map[uint64]bool{}
		for _, ev := range e {
			seen[ev.Goid] = true
		}
		return seen[g1] && seen[g2]
	})
	acts := ofKind(evs, event.TCPActivity)
	byG := map[uint64][]event.TCP{}
	for _, a := range acts {
		if a.PID != uint32(os.Getpid()) || a.Cookie == 0 {
			t.Errorf("activity not attributed: %+v", a)
		}
		byG[a.Goid] = append(byG[a.Goid], a)
	}
	if len(byG[g1]) == 0 || len(byG[g2]) == 0 {
		t.Fatalf("want activity of goroutines %d and %d, got %d events: %+v", g1, g2, len(acts), acts)
	}
	for g, as := range byG {
		if g != g1 && g != g2 && g != 0 {
			// The echo is read by whichever goroutine reads: only ours read.
			t.Errorf("activity of an unexpected goroutine %d: %d events", g, len(as))
		}
	}
}

// TestActivityPairedGoroutines: net/http's client writes a connection from
// one goroutine and reads it from another. Each alternation used to count
// as a takeover and cost a ring buffer event (two per request): now the
// socket remembers two goroutines, each reported once per direction per
// interval, and a third goroutine is still reported at once.
func TestActivityPairedGoroutines(t *testing.T) {
	c, conn, srv := goroutineSampling(t)
	const trips = 200
	ids := make(chan uint64, 3)
	next := make(chan struct{})
	done := make(chan struct{})
	go func() { // the reader
		defer close(done)
		ids <- goid()
		buf := make([]byte, 4)
		for i := 0; i < trips; i++ {
			if _, err := io.ReadFull(conn, buf); err != nil {
				t.Errorf("read echo: %v", err)
				return
			}
			next <- struct{}{}
		}
	}()
	writerDone := make(chan struct{})
	go func() { // the writer
		defer close(writerDone)
		ids <- goid()
		for i := 0; i < trips; i++ {
			if _, err := conn.Write([]byte("ping")); err != nil {
				t.Errorf("write: %v", err)
				return
			}
			<-next
		}
	}()
	<-done
	<-writerDone
	reader, writer := <-ids, <-ids
	if reader == writer {
		t.Fatal("one goroutine")
	}
	// A third goroutine takes the connection over: reported at once.
	third := make(chan struct{})
	go func() {
		defer close(third)
		ids <- goid()
		roundTrip(t, conn)
	}()
	<-third
	thirdID := <-ids
	evs := collect(t, c, addrPort(t, conn.LocalAddr()), srv, 3*time.Second, func(e []event.TCP) bool {
		for _, ev := range e {
			if ev.Goid == thirdID {
				return true
			}
		}
		return false
	})
	byG := map[uint64]int{}
	for _, a := range ofKind(evs, event.TCPActivity) {
		byG[a.Goid]++
	}
	if byG[thirdID] == 0 {
		t.Errorf("the third goroutine's takeover was not reported: %v", byG)
	}
	if byG[reader] == 0 || byG[writer] == 0 {
		t.Errorf("want the reader %d and the writer %d named, got %v", reader, writer, byG)
	}
	// One sample per goroutine and direction; the dial runs on the test's
	// goroutine (connect is not a send); allow one more for slack.
	if n := byG[reader] + byG[writer]; n > 3 {
		t.Errorf("%d activity events for %d round trips of a reader/writer pair, want <= 3 (one per goroutine and direction): %v", n, trips, byG)
	}
}

// TestReceiveHookOnDemand: where the send hook records owners, the receive
// hook (which ran on every read of every socket of the node) is attached
// only while some process's goroutines are bound (RegisterGoProcess: its
// detail tier is on), and detached again after.
func TestReceiveHookOnDemand(t *testing.T) {
	requireTracing(t)
	off := selfGoidOffset(t)
	p := netlab.NewPair(t)
	srv := serve(t, p, p.ServerAddr, false)
	c := startCollector(t, Config{PID: uint32(os.Getpid()), ActivityInterval: time.Hour})
	send, onDemand := false, ""
	for _, h := range c.Hooks() {
		switch h.Tracepoint {
		case "sock_send_length":
			send = h.Type != ""
		case "sock_recv_length":
			onDemand = h.OnDemand
		}
	}
	if !send {
		if onDemand != "" {
			t.Fatalf("no send hook, yet the receive hook is on demand (%s): accepted sockets would have no owner", onDemand)
		}
		t.Skip("sock_send_length is not attached on this kernel: the receive hook stays attached")
	}
	if onDemand == "" {
		t.Fatal("sock_recv_length is not marked on demand")
	}
	conn, err := p.Dial(context.Background(), "tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const trips = 50
	// Hook runs (sends and successful receives of this process: the
	// client's, and the echo server's) over trips round trips.
	runs := func() uint64 {
		s0, err := c.Stats()
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < trips; i++ {
			roundTrip(t, conn)
		}
		s1, err := c.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return s1.OwnerHits - s0.OwnerHits
	}
	cold := runs()
	if cold < trips {
		t.Fatalf("%d hook runs for %d round trips without goroutine binding: the client's sends alone are %d", cold, trips, trips)
	}
	if err := c.RegisterGoProcess(uint32(os.Getpid()), off); err != nil {
		t.Fatal(err)
	}
	bound := runs()
	if bound < cold+trips*9/10 {
		t.Errorf("with goroutine binding %d hook runs against %d without, for %d round trips: the client's receives are not hooked", bound, cold, trips)
	}
	if err := c.UnregisterGoProcess(uint32(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	if again := runs(); again > cold+trips/10 {
		t.Errorf("after the binding ended %d hook runs against %d before it: the receive hook is still attached", again, cold)
	}
}

// TestActivityEpochs: a socket in continuous use is sampled again in each
// activity epoch (userspace advances it every interval), not once for
// good, and not on every send.
func TestActivityEpochs(t *testing.T) {
	requireTracing(t)
	p := netlab.NewPair(t)
	srv := serve(t, p, p.ServerAddr, false)
	const interval = 200 * time.Millisecond
	c := startCollector(t, Config{PID: uint32(os.Getpid()), ActivityInterval: interval})
	conn, err := p.Dial(context.Background(), "tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	trips := 0
	for time.Since(start) < 6*interval {
		roundTrip(t, conn)
		trips++
		time.Sleep(5 * time.Millisecond)
	}
	epochs := float64(time.Since(start)) / float64(interval)
	evs := collect(t, c, addrPort(t, conn.LocalAddr()), srv, 500*time.Millisecond, nil)
	n := count(evs, event.TCPActivity)
	// One send sample per epoch (the receive hook is off: no goroutine
	// binding); a slow machine may delay an epoch's advance.
	if n < 3 || float64(n) > epochs+2 {
		t.Errorf("%d activity events for %d round trips over %.1f epochs of %v: want about one per epoch", n, trips, epochs, interval)
	}
}

// TestAdoptInbound: connections older than the collector have no
// handshake to tell their direction; adopting a server's sockets names the
// ones it accepted (their local port is its listener's), and a client's
// none.
func TestAdoptInbound(t *testing.T) {
	requireTracing(t)
	p := netlab.NewPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := netip.AddrPortFrom(p.ServerAddr, labPort)
	sink := startSink(ctx, t, p, srv)
	var conns []net.Conn
	for range 2 {
		err := p.InClient(func() error {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", srv.String())
			conns = append(conns, c)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	time.Sleep(100 * time.Millisecond) // accepted
	c := startCollector(t, Config{PID: uint32(sink.Process.Pid)})
	nl, nc, inbound, err := c.AdoptSocketsInbound(uint32(sink.Process.Pid), 0)
	if err != nil {
		t.Fatal(err)
	}
	if nl != 1 || nc != 2 || len(inbound) != 2 {
		t.Errorf("server: %d listeners, %d connections, %d inbound (%#x), want 1, 2, 2", nl, nc, len(inbound), inbound)
	}
	_, nc, inbound, err = c.AdoptSocketsInbound(uint32(os.Getpid()), 0)
	if err != nil {
		t.Fatal(err)
	}
	if nc < 2 || len(inbound) != 0 {
		t.Errorf("client (this test): %d connections, %d inbound, want at least 2 and none", nc, len(inbound))
	}
}

// startSink starts tcpsink listening on srv in p's server namespace and
// waits until it listens; it stops when ctx ends (and is waited for at the
// test's end).
func startSink(ctx context.Context, t *testing.T, p *netlab.Pair, srv netip.AddrPort) *exec.Cmd {
	t.Helper()
	sink := p.ServerCmd(ctx, testprog.Path(t, "tcpsink"), "-addr", srv.String())
	out, _ := sink.StdoutPipe()
	if err := sink.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Wait() })
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("tcpsink did not start: %v", err)
	}
	return sink
}

// TestAdoptTrouble: a connection older than the collector whose data is in
// RTO backoff, and a connect in SYN retries, are known from their TCP_INFO
// at the adoption (they may run no hook again before the request waiting
// on them expires); a healthy connection is not listed.
func TestAdoptTrouble(t *testing.T) {
	requireTracing(t)
	p := netlab.NewPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := netip.AddrPortFrom(p.ServerAddr, labPort)
	startSink(ctx, t, p, srv)
	healthy, err := p.Dial(ctx, "tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	stuck, err := p.Dial(ctx, "tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if _, err := healthy.Write([]byte("acked")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // acknowledged
	if err := p.Blackhole(int(labPort)); err != nil {
		t.Fatal(err)
	}
	// Data that is never acknowledged: RTOs at ~0.2, 0.6 and 1.4 s.
	if _, err := stuck.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	// A connect whose SYN is dropped, by a process of the client's
	// namespace (its peer is read from /proc/PID/net/tcp: getpeername
	// fails before the handshake): its first retry after 1 s.
	dialer := p.ClientCmd(ctx, testprog.Path(t, "tcpclient"), "-addr", srv.String())
	if err := dialer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { dialer.Process.Kill(); dialer.Wait() }()
	time.Sleep(1500 * time.Millisecond)
	c := startCollector(t, Config{PID: uint32(os.Getpid())})
	a, err := c.Adopt(uint32(os.Getpid()), 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Adopt(uint32(dialer.Process.Pid), 0)
	if err != nil {
		t.Fatal(err)
	}
	stuckLocal := addrPort(t, stuck.LocalAddr())
	var rto, syn bool
	for _, ev := range append(a.Trouble, b.Trouble...) {
		t.Logf("in trouble at the adoption: pid %d %s %v -> %v state %v ca %v backoff %d retransmits %d rto %v", ev.PID, ev.Kind, ev.Local, ev.Peer, ev.State, ev.CAState, ev.Backoff, ev.Retransmits, ev.RTO)
		if !ev.AtAttach || ev.Cookie == 0 || ev.Peer != srv {
			t.Errorf("record %+v: want at_attach, a cookie, peer %v", ev, srv)
		}
		switch {
		case ev.Kind == event.TCPRTO && ev.Local == stuckLocal && ev.PID == uint32(os.Getpid()):
			rto = ev.Backoff >= 1 && ev.Retransmits >= 1 && ev.RTO >= 400*time.Millisecond
		case ev.Kind == event.TCPSynRetransmit && ev.PID == uint32(dialer.Process.Pid):
			syn = ev.Retransmits >= 1
		default:
			t.Errorf("unexpected record: %s on %v (the healthy connection is %v)", ev.Kind, ev.Local, healthy.LocalAddr())
		}
	}
	if !rto || !syn {
		t.Errorf("rto record of the stuck connection: %v, syn_retransmit record of the connect: %v; want both", rto, syn)
	}
}

func TestParseProcNetAddr(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"0100007F:1F90", "127.0.0.1:8080"},
		{"0A06D50A:0050", "10.213.6.10:80"},
		{"00000000000000000000000001000000:01BB", "[::1]:443"},
		{"0000000000000000FFFF00000100007F:1F90", "127.0.0.1:8080"},
	} {
		got, ok := parseProcNetAddr(c.in)
		if !ok || got.String() != c.want {
			t.Errorf("parseProcNetAddr(%q) = %v, %v; want %s", c.in, got, ok, c.want)
		}
	}
	if _, ok := parseProcNetAddr("nonsense"); ok {
		t.Error("parsed nonsense")
	}
}
