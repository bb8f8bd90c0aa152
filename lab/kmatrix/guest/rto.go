package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/timeout-tracer/tracer/collector/tcp"
	"github.com/timeout-tracer/tracer/event"
)

// lossLab is a loopback peer whose received segments can be dropped: a
// tcpsink in a cgroup of its own, test clients, and the drop program.
type lossLab struct {
	cfg   config
	cg    *cgroup
	srv   netip.AddrPort
	drop  *dropper
	stops []func()
}

// labClient is one tcpclient connected to the lab's sink.
type labClient struct {
	pid   int
	local netip.AddrPort
}

func startLossLab(cfg config) (_ *lossLab, err error) {
	l := &lossLab{cfg: cfg}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	if l.cg, err = newCgroup(); err != nil {
		return nil, err
	}
	sink := exec.Command(cfg.prog("tcpsink"), "-addr", "127.0.0.1:0")
	sink.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: l.cg.fd}
	line, stop, err := startReading(sink, "listening ")
	if err != nil {
		return nil, fmt.Errorf("start tcpsink: %w", err)
	}
	l.stops = append(l.stops, stop)
	if l.srv, err = netip.ParseAddrPort(line); err != nil {
		return nil, fmt.Errorf("tcpsink said %q: %w", line, err)
	}
	return l, nil
}

// client starts a tcpclient that writes to the sink every 50 ms.
func (l *lossLab) client() (labClient, error) {
	cmd := exec.Command(l.cfg.prog("tcpclient"), "-addr", l.srv.String(), "-every", "50ms", "-duration", "60s")
	line, stop, err := startReading(cmd, "connected ")
	if err != nil {
		return labClient{}, fmt.Errorf("start tcpclient: %w", err)
	}
	l.stops = append(l.stops, stop)
	local, err := netip.ParseAddrPort(line)
	if err != nil {
		return labClient{}, fmt.Errorf("tcpclient said %q: %w", line, err)
	}
	return labClient{pid: cmd.Process.Pid, local: local}, nil
}

// blackhole drops every segment to the sink from now on.
func (l *lossLab) blackhole() (err error) {
	l.drop, err = startDrop(l.cg, l.srv.Port())
	return err
}

func (l *lossLab) dropped() uint64 {
	if l.drop == nil {
		return 0
	}
	return l.drop.Dropped()
}

// Close stops the programs (clients first), detaches the drop program and
// removes the cgroup.
func (l *lossLab) Close() {
	for i := len(l.stops) - 1; i >= 0; i-- {
		l.stops[i]()
	}
	if l.drop != nil {
		l.drop.Close()
	}
	if l.cg != nil {
		l.cg.Close()
	}
}

// rtoChecks runs the rto checks of one collector mode. Two clients are
// blackholed at once: one connected before the collector attached (its
// owner can only be learnt from a later send or receive) and one after (the
// owner is recorded at connect). Each gets its own check.
func rtoChecks(ctx context.Context, cfg config, out *reporter, forceRaw bool) {
	attach, rto, pre := "tcp_attach", "rto_owner", "rto_preexisting"
	if forceRaw {
		attach, rto, pre = attach+"_raw_tp", rto+"_raw_tp", pre+"_raw_tp"
	}
	if !out.wants(attach) && !out.wants(rto) && !out.wants(pre) {
		return
	}
	fail := func(err error) {
		out.check(rto, err, "")
		out.check(pre, err, "")
	}
	lab, err := startLossLab(cfg)
	if err != nil {
		out.check(attach, err, "")
		fail(err)
		return
	}
	defer lab.Close()
	early, err := lab.client()
	if err != nil {
		fail(err)
		return
	}
	c := checkAttach(out, attach, forceRaw)
	if c == nil {
		fail(errors.New("collector not attached"))
		return
	}
	defer c.Close()
	late, err := lab.client()
	if err != nil {
		fail(err)
		return
	}
	time.Sleep(300 * time.Millisecond) // healthy sends first
	if err := lab.blackhole(); err != nil {
		fail(err)
		return
	}
	evs := collectTCP(ctx, c, lab.srv, 20*time.Second, 3, early.local, late.local)
	st, err := c.Stats()
	if err != nil {
		fail(err)
		return
	}
	lost := st.Lost + st.DecodeErrors + st.Missed

	detail, err := verifyRTOs(evs[late.local], late.pid, lab.dropped(), lost)
	out.check(rto, err, detail)

	// A socket opened before the collector is attributed on its next send
	// (sock_send_length, 6.3+) or receive (sock_recv_length, or
	// tcp_rcv_space_adjust before 6.3). This client only sends: without
	// sock_send_length its events stay unattributed, as documented.
	sendHook := false
	for _, h := range c.Hooks() {
		sendHook = sendHook || (h.Tracepoint == "sock_send_length" && h.Type != "")
	}
	detail, err = verifyRTOs(evs[early.local], early.pid, lab.dropped(), lost)
	if !sendHook && errors.Is(err, errUnowned) {
		out.known(pre, "owner unknown (pid 0) until the socket receives: no sock_send_length tracepoint; "+detail)
		return
	}
	out.check(pre, err, detail)
}

// errUnowned is returned by verifyRTOs when the events carry no owner.
var errUnowned = errors.New("events carry no owner (pid 0)")

func verifyRTOs(evs []event.TCP, owner int, dropped, lost uint64) (string, error) {
	var rtos []event.TCP
	var kinds []string
	n := map[string]int{}
	for _, e := range evs {
		if n[e.Kind.String()]++; n[e.Kind.String()] == 1 {
			kinds = append(kinds, e.Kind.String())
		}
		if e.Kind == event.TCPRTO {
			rtos = append(rtos, e)
		}
	}
	for i, k := range kinds {
		kinds[i] = fmt.Sprintf("%s=%d", k, n[k])
	}
	var backoffs, rtoMs, total []string
	for _, e := range rtos {
		backoffs = append(backoffs, fmt.Sprint(e.Backoff))
		rtoMs = append(rtoMs, fmt.Sprint(e.RTO.Milliseconds()))
		total = append(total, fmt.Sprint(e.TotalRetrans))
	}
	detail := fmt.Sprintf("events %s; rto backoff %s, rto_ms %s, total_retrans %s; client pid %d; %d packets dropped; %d events lost",
		strings.Join(kinds, " "), strings.Join(backoffs, ","), strings.Join(rtoMs, ","), strings.Join(total, ","), owner, dropped, lost)
	if len(rtos) < 3 {
		return detail, fmt.Errorf("%d rto events, want >= 3", len(rtos))
	}
	for _, e := range evs {
		if e.PID == 0 {
			return detail, fmt.Errorf("%s event: %w, want the client %d", e.Kind, errUnowned, owner)
		}
		if int(e.PID) != owner || e.Comm != "tcpclient" {
			return detail, fmt.Errorf("%s event owned by pid %d %q, want the client %d", e.Kind, e.PID, e.Comm, owner)
		}
	}
	var skipped []string
	for i, e := range rtos {
		if e.CAState.String() != "loss" || e.State.String() != "ESTABLISHED" || e.Cookie == 0 {
			return detail, fmt.Errorf("rto snapshot wrong: ca_state %s state %s cookie %d", e.CAState, e.State, e.Cookie)
		}
		if i == 0 {
			continue
		}
		prev := rtos[i-1]
		if e.Backoff == prev.Backoff+1 {
			continue
		}
		// A firing with no event: the timer ran (the backoff grew, the
		// RTO doubled, and total_retrans at the next event is 2 up, so
		// the kernel did retransmit) but no rto event came. On the 6.18
		// host about one run in 5-60 shows it, when both clients'
		// timers fire together; CI's first sighting was backoff 0,2,3.
		// An unfiltered raw_tp program counting every tcp_retransmit_skb
		// call per port, attached alongside, missed the same firing, and
		// no program recorded a recursion miss: the tracepoint was not
		// reached for that retransmission. Why, we have not found (see
		// docs/kmatrix.md). So the gap passes only when our
		// side lost nothing (ring buffer reserve failures, recursion
		// misses, undecodable samples) and the RTO at the event is the
		// first one doubled per step of backoff; the detail names it.
		step := int(e.Backoff) - int(rtos[0].Backoff)
		want := rtos[0].RTO << max(step, 0)
		if e.Backoff <= prev.Backoff || lost != 0 || step > 16 || (e.RTO-want).Abs() > want/100 {
			return detail, errors.New("backoff does not grow by one per rto")
		}
		for b := prev.Backoff + 1; b < e.Backoff; b++ {
			skipped = append(skipped, fmt.Sprint(b))
		}
	}
	if len(skipped) > 0 {
		detail += fmt.Sprintf("; no event at backoff %s, none lost on our side", strings.Join(skipped, ","))
	}
	if first, last := rtos[0].RTO, rtos[len(rtos)-1].RTO; first < 200*time.Millisecond || last < 2*first {
		return detail, fmt.Errorf("rto %v -> %v: want >= 200ms and at least doubled", first, last)
	}
	return detail, nil
}

// collectTCP gathers the events of the connections from the local
// addresses to peer until each has wantRTO rto events, the timeout passes
// or ctx ends.
func collectTCP(ctx context.Context, c *tcp.Collector, peer netip.AddrPort, timeout time.Duration, wantRTO int, locals ...netip.AddrPort) map[netip.AddrPort][]event.TCP {
	got := map[netip.AddrPort][]event.TCP{}
	rtos := map[netip.AddrPort]int{}
	done := func() bool {
		for _, l := range locals {
			if rtos[l] < wantRTO {
				return false
			}
		}
		return true
	}
	deadline := time.After(timeout)
	for !done() {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				return got
			}
			if ev.Peer != peer || !slices.Contains(locals, ev.Local) {
				continue
			}
			got[ev.Local] = append(got[ev.Local], ev)
			if ev.Kind == event.TCPRTO {
				rtos[ev.Local]++
			}
		case <-deadline:
			return got
		case <-ctx.Done():
			return got
		}
	}
	return got
}

// startReading starts a test program and waits for its first line, which
// must begin with prefix; it returns the rest of that line and a function
// that kills the program and reaps it.
func startReading(cmd *exec.Cmd, prefix string) (string, func(), error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(stdout)
		l, _ := br.ReadString('\n')
		lines <- l
		io.Copy(io.Discard, br)
	}()
	select {
	case l := <-lines:
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), prefix)
		if !ok {
			stop()
			return "", nil, fmt.Errorf("first line %q, want %q...: %s", l, prefix, stderr.String())
		}
		return rest, stop, nil
	case <-time.After(20 * time.Second):
		stop()
		return "", nil, fmt.Errorf("no %q line within 20s: %s", prefix, stderr.String())
	}
}
