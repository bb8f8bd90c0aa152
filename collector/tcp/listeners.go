package tcp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/timeout-tracer/tracer/collector"
)

// A listening socket of a process: its network namespace and port.
type listener struct {
	netns uint32
	port  uint16
}

// A connected (or connecting) TCP socket of a process: its cookie, network
// namespace and local port.
type conn struct {
	cookie uint64
	netns  uint32
	port   uint16
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
	ls, cs, err := processSockets(int(pid))
	if len(ls) == 0 && len(cs) == 0 {
		return 0, 0, nil, err
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
		return 0, 0, nil, errClosed
	}
	for _, l := range ls {
		// Replacing what the kernel side recorded: this process holds the
		// socket now, whoever called listen() (systemd's socket
		// activation, a parent that handed it over).
		if err := c.maps.Listeners.Update(tcpTtListenKey{Netns: l.netns, Port: l.port}, o, ebpf.UpdateAny); err != nil {
			return listeners, conns, inbound, fmt.Errorf("adopt listener port %d of pid %d: %w", l.port, pid, err)
		}
		listeners++
	}
	for _, k := range cs {
		// By cookie: the kernel side gives the owner to the socket's entry
		// at its next event, when it has none (a known owner stands).
		if err := c.maps.Adopted.Update(k.cookie, o, ebpf.UpdateAny); err != nil {
			return listeners, conns, inbound, fmt.Errorf("adopt connection %#x of pid %d: %w", k.cookie, pid, err)
		}
		conns++
	}
	return listeners, conns, inbound, err
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
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err != nil || !strings.HasPrefix(l, "socket:[") {
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
	port, ns, ok := localEnd(fd)
	if !ok {
		return conn{}, false
	}
	return conn{cookie: cookie, netns: ns, port: port}, true
}

// localEnd is socket fd's local port and the inode of the network
// namespace it lives in.
func localEnd(fd int) (port uint16, netns uint32, ok bool) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return 0, 0, false
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		port = uint16(a.Port)
	case *unix.SockaddrInet6:
		port = uint16(a.Port)
	default:
		return 0, 0, false
	}
	nsfd, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS)
	if err != nil {
		return 0, 0, false
	}
	defer unix.Close(nsfd)
	var st unix.Stat_t
	if err := unix.Fstat(nsfd, &st); err != nil {
		return 0, 0, false
	}
	return port, uint32(st.Ino), true
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
	port, ns, ok := localEnd(fd)
	if !ok {
		return listener{}, false
	}
	return listener{netns: ns, port: port}, true
}
