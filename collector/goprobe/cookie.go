package goprobe

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// lateCookie resolves the cookie of a binding whose socket no kernel hook
// has seen yet (a connection opened before the tracer attached: its cookie
// is made on first use, and a uprobe cannot make it): a duplicate of the
// target's descriptor (pidfd_getfd) asked for SO_COOKIE, which is the
// cookie the kernel events will carry from then on. 0 when it cannot be
// resolved (counted).
func (p *Process) lateCookie(r *gocallsTtGoBinding) {
	if r.Cookie != 0 || r.Fd < 0 {
		return
	}
	switch r.Kind {
	case uint8(gocallsTtGoBindingKindTT_BIND_HTTP_ROUNDTRIP), uint8(gocallsTtGoBindingKindTT_BIND_GRPC_STREAM),
		uint8(gocallsTtGoBindingKindTT_BIND_DIAL):
	default:
		return
	}
	c, err := socketCookie(int(r.Pid), int(r.Fd))
	if err != nil {
		p.mu.Lock()
		p.ext.lateCookieErrs++
		p.mu.Unlock()
		p.log.Debug("no cookie for a bound connection", "pid", r.Pid, "fd", r.Fd, "err", err)
		return
	}
	r.Cookie = c
}

// socketCookie is the cookie of descriptor fd of process pid, which must be
// a TCP socket.
func socketCookie(pid, fd int) (uint64, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	dup, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return 0, fmt.Errorf("pidfd_getfd %d/%d: %w", pid, fd, err)
	}
	defer unix.Close(dup)
	if typ, err := unix.GetsockoptInt(dup, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil || typ != unix.IPPROTO_TCP {
		return 0, fmt.Errorf("descriptor %d of %d is not a TCP socket (protocol %d, %v)", fd, pid, typ, err)
	}
	c, err := unix.GetsockoptUint64(dup, unix.SOL_SOCKET, unix.SO_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("SO_COOKIE: %w", err)
	}
	return c, nil
}
