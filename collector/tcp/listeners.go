package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/tick"
)

// A listening socket of a process: its network namespace and port.
type listener struct {
	netns uint32
	port  uint16
}

// A connected (or connecting) TCP socket of a process: its cookie, network
// namespace and local port, its addresses, and its TCP_INFO (nil when the
// kernel did not give it).
type conn struct {
	cookie      uint64
	netns       uint32
	port        uint16
	local, peer netip.AddrPort
	info        *unix.TCPInfo
}

// AdoptListeners records process pid as the owner of the listening TCP
// (and MPTCP) sockets it holds now, so that connections they accept from
// now on are attributed to it from their handshake. The kernel side
// records listeners at listen(); this is for those older than the
// collector (a service traced while running). cgroupID is the owner's
// cgroup id as the kernel hooks record it (workload.CgroupID; 0 when
// unknown: the kernel side fills it in at the socket's first send). It
// returns how many listeners were recorded.
//
// Each socket descriptor is duplicated with pidfd_getfd (Linux 5.6+, the
// same privilege as ptrace), asked whether it listens, for its port and
// for its network namespace (a socket may live in another namespace than
// its process), and closed. /proc/PID/net/tcp cannot be used: an MPTCP
// listener (Go's default since 1.24) is not in it, only its subflow, whose
// inode is not the process's descriptor.
func (c *Collector) AdoptListeners(pid uint32, cgroupID uint64) (int, error) {
	n, _, err := c.AdoptSockets(pid, cgroupID)
	return n, err
}

// AdoptSockets is AdoptListeners, and records pid as the owner of its
// connected TCP sockets too, those the kernel side has no owner for yet: a
// connection older than the collector that never sends again (its data
// unacknowledged, in RTO backoff, a SYN unanswered) had its retransmits
// reported with no process, and the process's timeouts read "no TCP I/O:
// local". The first send in the owner's context corrects what this wrote.
// It returns how many listeners and connections were recorded.
func (c *Collector) AdoptSockets(pid uint32, cgroupID uint64) (listeners, conns int, err error) {
	listeners, conns, _, err = c.AdoptSocketsInbound(pid, cgroupID)
	return listeners, conns, err
}

// AdoptSocketsInbound is AdoptSockets, and it also returns the cookies of
// the connections the process accepted: those whose local port is one of
// its listening ports in the same network namespace (a connection older
// than the collector has no handshake to say so).
func (c *Collector) AdoptSocketsInbound(pid uint32, cgroupID uint64) (listeners, conns int, inbound []uint64, err error) {
	a, err := c.Adopt(pid, cgroupID)
	return a.Listeners, a.Conns, a.Inbound, err
}

// Adoption is what Adopt found and recorded.
type Adoption struct {
	Listeners, Conns int
	// Inbound: the cookies of the connections the process accepted.
	Inbound []uint64
	// Trouble: the connections that were in trouble at the adoption, as
	// records of their state (event.TCP with AtAttach): data in RTO
	// backoff, a connect in SYN retries, a closed window being probed.
	// Such a socket may run no hook again before the request waiting on
	// it expires.
	Trouble []event.TCP
}

// Adopt is AdoptSocketsInbound, and it also reads each connection's
// TCP_INFO from the duplicated descriptor: the state of the connections
// that were in trouble when the tracer came (Adoption.Trouble).
func (c *Collector) Adopt(pid uint32, cgroupID uint64) (Adoption, error) {
	listeners, conns, inbound, cs, err := c.adopt(pid, cgroupID)
	a := Adoption{Listeners: listeners, Conns: conns, Inbound: inbound}
	if conns == 0 {
		return a, err
	}
	comm := collector.Comm(int(pid))
	mono := tick.Mono()
	now := c.clk.Wall(mono)
	for _, k := range cs {
		if ev, ok := troubleAt(k, mono); ok {
			ev.Time, ev.PID, ev.Comm, ev.CgroupID = now, pid, comm, cgroupID
			a.Trouble = append(a.Trouble, ev)
		}
	}
	return a, err
}

// Kernel TCP states and the congestion-avoidance state Loss, as TCP_INFO
// gives them.
const (
	tcpiEstablished = 1
	tcpiSynSent     = 2
	tcpiCloseWait   = 8
	tcpiCALoss      = 4
)

// troubleAt is the record of connection k's state if it is in trouble:
// unacknowledged data in CA state Loss (the RTO fired and backs off),
// a SYN retried, or zero-window probes out (backing off) with the peer's
// window closed.
func troubleAt(k conn, mono uint64) (event.TCP, bool) {
	ti := k.info
	if ti == nil {
		return event.TCP{}, false
	}
	ev := event.TCP{
		Mono: mono, AtAttach: true, NetNS: k.netns, Cookie: k.cookie, Local: k.local, Peer: k.peer,
		State: event.TCPState(ti.State), CAState: event.CAState(ti.Ca_state),
		SRTT: time.Duration(ti.Rtt) * time.Microsecond, RTTVar: time.Duration(ti.Rttvar) * time.Microsecond,
		RTO: time.Duration(ti.Rto) * time.Microsecond, Backoff: ti.Backoff, Retransmits: ti.Retransmits,
		Cwnd: ti.Snd_cwnd, RetransOut: ti.Retrans, LostOut: ti.Lost, TotalRetrans: ti.Total_retrans, SndWnd: ti.Snd_wnd,
	}
	switch {
	case ti.State == tcpiSynSent && ti.Retransmits > 0:
		ev.Kind = event.TCPSynRetransmit
	case (ti.State == tcpiEstablished || ti.State == tcpiCloseWait) && ti.Ca_state == tcpiCALoss && ti.Unacked > 0 && ti.Retransmits > 0:
		ev.Kind = event.TCPRTO
	case (ti.State == tcpiEstablished || ti.State == tcpiCloseWait) && ti.Probes > 0 && ti.Backoff > 0 && ti.Snd_wnd == 0 && ti.Unacked == 0:
		// Keepalive probes count in probes too, but do not back off;
		// tcpi_snd_wnd reads 0 before Linux 5.19 (a shorter TCP_INFO),
		// so the backoff is what tells zero-window probes apart.
		ev.Kind = event.TCPZeroWindow
	default:
		return event.TCP{}, false
	}
	return ev, true
}

func (c *Collector) adopt(pid uint32, cgroupID uint64) (listeners, conns int, inbound []uint64, cs []conn, err error) {
	ls, cs, err := processSockets(int(pid))
	if len(ls) == 0 && len(cs) == 0 {
		return 0, 0, nil, nil, err
	}
	for _, k := range cs {
		if slices.Contains(ls, listener{netns: k.netns, port: k.port}) {
			inbound = append(inbound, k.cookie)
		}
	}
	o := tcpTtOwner{Tgid: pid, CgroupId: cgroupID}
	copy(o.Comm[:len(o.Comm)-1], collector.Comm(int(pid)))
	c.goMu.Lock()
	defer c.goMu.Unlock()
	if c.closed {
		return 0, 0, nil, nil, errClosed
	}
	for _, l := range ls {
		// Replacing what the kernel side recorded: this process holds the
		// socket now, whoever called listen() (systemd's socket
		// activation, a parent that handed it over).
		if err := c.maps.Listeners.Update(tcpTtListenKey{Netns: l.netns, Port: l.port}, o, ebpf.UpdateAny); err != nil {
			return listeners, conns, inbound, cs, fmt.Errorf("adopt listener port %d of pid %d: %w", l.port, pid, err)
		}
		listeners++
	}
	for _, k := range cs {
		// By cookie: the kernel side gives the owner to the socket's entry
		// at its next event, when it has none (a known owner stands).
		if err := c.maps.Adopted.Update(k.cookie, o, ebpf.UpdateAny); err != nil {
			return listeners, conns, inbound, cs, fmt.Errorf("adopt connection %#x of pid %d: %w", k.cookie, pid, err)
		}
		conns++
	}
	return listeners, conns, inbound, cs, err
}

// processSockets lists the listening stream sockets and the connected TCP
// sockets of process pid.
func processSockets(pid int) ([]listener, []conn, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("list the descriptors of pid %d: %w", pid, err)
	}
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("pidfd of pid %d: %w", pid, err)
	}
	defer unix.Close(pfd)
	var ls []listener
	var cs []conn
	var procNet map[uint64]netip.AddrPort // inode -> peer, read once when needed
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fd, err := unix.PidfdGetfd(pfd, n, 0)
		switch {
		case errors.Is(err, unix.EBADF):
			continue // closed since the listing
		case err != nil:
			return ls, cs, fmt.Errorf("duplicate descriptor %d of pid %d: %w", n, pid, err)
		}
		if l, ok := listening(fd); ok {
			ls = append(ls, l)
		} else if k, ok := connected(fd); ok {
			if !k.peer.IsValid() {
				// A connect in progress: getpeername says ENOTCONN, the
				// kernel's table has the address it dials.
				if procNet == nil {
					procNet = procNetPeers(pid)
				}
				ino, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]"), 10, 64)
				k.peer = procNet[ino]
			}
			cs = append(cs, k)
		}
		unix.Close(fd)
	}
	return ls, cs, nil
}

// connected reports whether fd is a TCP socket that is not listening (an
// MPTCP socket is not: its subflows are the kernel's TCP sockets), with
// its cookie, namespace and local port.
func connected(fd int) (conn, bool) {
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 0 {
		return conn{}, false
	}
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil || v != unix.IPPROTO_TCP {
		return conn{}, false
	}
	cookie, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
	if err != nil || cookie == 0 {
		return conn{}, false
	}
	local, ns, ok := localEnd(fd)
	if !ok {
		return conn{}, false
	}
	k := conn{cookie: cookie, netns: ns, port: local.Port(), local: local}
	if sa, err := unix.Getpeername(fd); err == nil {
		k.peer = sockAddrPort(sa)
	}
	if ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
		k.info = ti
	}
	return k, true
}

// procNetPeers maps the inodes of the TCP sockets in pid's network
// namespace to their remote addresses, from /proc/PID/net/tcp and tcp6.
func procNetPeers(pid int) map[uint64]netip.AddrPort {
	out := map[uint64]netip.AddrPort{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 {
				continue
			}
			ino, err := strconv.ParseUint(fs[9], 10, 64)
			if err != nil || ino == 0 {
				continue
			}
			if ap, ok := parseProcNetAddr(fs[2]); ok {
				out[ino] = ap
			}
		}
	}
	return out
}

// parseProcNetAddr parses /proc/net/tcp's "0100007F:1F90": the address as
// the kernel's 32-bit words printed in host order, the port in hex.
func parseProcNetAddr(s string) (netip.AddrPort, bool) {
	a, p, ok := strings.Cut(s, ":")
	if !ok || (len(a) != 8 && len(a) != 32) {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	var raw [16]byte
	for w := 0; w < len(a)/8; w++ {
		v, err := strconv.ParseUint(a[8*w:8*w+8], 16, 32)
		if err != nil {
			return netip.AddrPort{}, false
		}
		binary.NativeEndian.PutUint32(raw[4*w:], uint32(v))
	}
	if len(a) == 8 {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(raw[:4])), uint16(port)), true
	}
	return netip.AddrPortFrom(netip.AddrFrom16(raw).Unmap(), uint16(port)), true
}

// sockAddrPort is a socket address as a netip.AddrPort (IPv4-mapped IPv6
// addresses unmapped, as the kernel side reports them); zero for others.
func sockAddrPort(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	}
	return netip.AddrPort{}
}

// localEnd is socket fd's local address and the inode of the network
// namespace it lives in.
func localEnd(fd int) (local netip.AddrPort, netns uint32, ok bool) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}, 0, false
	}
	if local = sockAddrPort(sa); !local.IsValid() {
		return netip.AddrPort{}, 0, false
	}
	nsfd, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS)
	if err != nil {
		return netip.AddrPort{}, 0, false
	}
	defer unix.Close(nsfd)
	var st unix.Stat_t
	if err := unix.Fstat(nsfd, &st); err != nil {
		return netip.AddrPort{}, 0, false
	}
	return local, uint32(st.Ino), true
}

// listening reports whether fd is a listening TCP or MPTCP socket, with its
// namespace and port.
func listening(fd int) (listener, bool) {
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
		return listener{}, false
	}
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || v != unix.SOCK_STREAM {
		return listener{}, false
	}
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil || (v != unix.IPPROTO_TCP && v != unix.IPPROTO_MPTCP) {
		return listener{}, false
	}
	local, ns, ok := localEnd(fd)
	if !ok {
		return listener{}, false
	}
	return listener{netns: ns, port: local.Port()}, true
}
