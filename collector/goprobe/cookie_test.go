package goprobe

import (
	"errors"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSocketCookie: the cookie read through a duplicate of a process's
// descriptor is the socket's own; a descriptor that is not a TCP socket
// is refused, never given a cookie.
func TestSocketCookie(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	var want uint64
	var werr error
	raw.Control(func(f uintptr) {
		fd = int(f)
		want, werr = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
	})
	if werr != nil {
		t.Skipf("SO_COOKIE unsupported here: %v", werr)
	}
	got, err := socketCookie(os.Getpid(), fd)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			t.Skipf("pidfd_getfd unavailable: %v", err)
		}
		t.Fatal(err)
	}
	if got != want || got == 0 {
		t.Errorf("cookie %d, want %d", got, want)
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if c, err := socketCookie(os.Getpid(), int(r.Fd())); err == nil {
		t.Errorf("a pipe got cookie %d", c)
	}
	if c, err := socketCookie(os.Getpid(), 1<<20); err == nil {
		t.Errorf("a closed descriptor got cookie %d", c)
	}
}
