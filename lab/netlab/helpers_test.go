package netlab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// families are the networks every fault is tried on: each must work for IPv4 and IPv6.
var families = []string{"tcp4", "tcp6"}

// serverAddr returns the server's address for network.
func serverAddr(p *Pair, network string) netip.Addr {
	if network == "tcp6" {
		return p.ServerAddr6
	}
	return p.ServerAddr
}

// clientAddr returns the client's address for network.
func clientAddr(p *Pair, network string) netip.Addr {
	if network == "tcp6" {
		return p.ClientAddr6
	}
	return p.ClientAddr
}

// startEcho starts an echo server on the server's address for network and returns the
// address to dial.
func startEcho(t *testing.T, p *Pair, network string, port uint16) netip.AddrPort {
	t.Helper()
	l, err := p.Listen(network, netip.AddrPortFrom(serverAddr(p, network), port).String())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String())
}

// dial dials addr from the client namespace with a test-bounded context.
func dial(t *testing.T, p *Pair, network string, addr netip.AddrPort) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := p.Dial(ctx, network, addr.String())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// roundTrip writes msg and reads the echo, within timeout.
func roundTrip(c net.Conn, msg []byte, timeout time.Duration) error {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo: got %q, want %q", got, msg)
	}
	return nil
}

// totalRetrans returns the kernel's count of segments the connection retransmitted, which
// tells a fault that drops packets from a peer that merely stays silent.
func totalRetrans(t *testing.T, c net.Conn) uint32 {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("read TCP_INFO: %v", serr)
	}
	return info.Total_retrans
}

// freePort returns a port nothing listens on in the server namespace: a socket bound to it
// that never listens, held until the test ends, so the port cannot be taken meanwhile and a
// SYN to it is answered with a reset.
//
// Listening and closing, as this did before, raced with fork: a parallel test's exec of ip
// copies the fd table, and until the child's exec closes its copy (CLOEXEC), the "closed"
// listener is still open in the child and answers SYNs — a dial that should be refused
// succeeded, or was reset, about once in 30 runs.
func freePort(t *testing.T, p *Pair, network string) uint16 {
	t.Helper()
	addr := serverAddr(p, network)
	family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Addr: addr.As16()})
	if addr.Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Addr: addr.As4()}
	}
	var fd int
	if err := p.InServer(func() error {
		var err error
		if fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		return unix.Bind(fd, sa)
	}); err != nil {
		t.Fatalf("bind a port in %s: %v", p.ServerNS, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	bound, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	switch sa := bound.(type) {
	case *unix.SockaddrInet4:
		return uint16(sa.Port)
	case *unix.SockaddrInet6:
		return uint16(sa.Port)
	}
	t.Fatalf("bound to %T", bound)
	return 0
}

// wantErrno fails the test unless err wraps errno.
func wantErrno(t *testing.T, err error, errno unix.Errno) {
	t.Helper()
	if !errors.Is(err, errno) {
		t.Fatalf("got error %v, want %v (%s)", err, errno, unix.ErrnoName(errno))
	}
}
