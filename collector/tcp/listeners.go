package tcp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	ls, err := listeningSockets(int(pid))
	if err != nil || len(ls) == 0 {
		return 0, err
	}
	o := tcpTtOwner{Tgid: pid, CgroupId: cgroupID}
	copy(o.Comm[:len(o.Comm)-1], collector.Comm(int(pid)))
	c.goMu.Lock()
	defer c.goMu.Unlock()
	if c.closed {
		return 0, errClosed
	}
	m := c.maps.Listeners
	n := 0
	for _, l := range ls {
		// Replacing what the kernel side recorded: this process holds the
		// socket now, whoever called listen() (systemd's socket
		// activation, a parent that handed it over).
		if err := m.Update(tcpTtListenKey{Netns: l.netns, Port: l.port}, o, ebpf.UpdateAny); err != nil {
			return n, fmt.Errorf("adopt listener port %d of pid %d: %w", l.port, pid, err)
		}
		n++
	}
	return n, nil
}

// listeningSockets lists the listening stream sockets of process pid.
func listeningSockets(pid int) ([]listener, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list the descriptors of pid %d: %w", pid, err)
	}
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd of pid %d: %w", pid, err)
	}
	defer unix.Close(pfd)
	var out []listener
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
			return out, fmt.Errorf("duplicate descriptor %d of pid %d: %w", n, pid, err)
		}
		if l, ok := listening(fd); ok {
			out = append(out, l)
		}
		unix.Close(fd)
	}
	return out, nil
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
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return listener{}, false
	}
	var port int
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		port = a.Port
	case *unix.SockaddrInet6:
		port = a.Port
	default:
		return listener{}, false
	}
	ns, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS)
	if err != nil {
		return listener{}, false
	}
	defer unix.Close(ns)
	var st unix.Stat_t
	if err := unix.Fstat(ns, &st); err != nil {
		return listener{}, false
	}
	return listener{netns: uint32(st.Ino), port: uint16(port)}, true
}
