package netlab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// InClient runs fn on the calling goroutine's OS thread, switched into the client
// namespace, and switches the thread back afterwards. See InServer for the rules fn must
// follow.
func (p *Pair) InClient(fn func() error) error {
	return inNetns(p.ClientNS, fn)
}

// InServer runs fn on the calling goroutine's OS thread, switched into the server
// namespace, and switches the thread back afterwards.
//
// A network namespace belongs to a thread, not to a process, so the goroutine is locked
// to its thread while fn runs. Sockets that fn creates stay in the namespace for their
// whole life and can be used from any goroutine afterwards. Goroutines that fn starts run
// on other threads, in the host's namespace; and name resolution may run in other
// goroutines, so fn should use literal IP addresses.
//
// If switching back fails, the error says so and the goroutine stays locked to the
// thread, still inside the namespace: Go destroys a thread whose goroutine exits while
// locked, so the wrong namespace never leaks to other goroutines. Code that keeps running
// on such a goroutine runs inside the namespace; treat the error as fatal.
func (p *Pair) InServer(fn func() error) error {
	return inNetns(p.ServerNS, fn)
}

func inNetns(name string, fn func() error) (err error) {
	target, err := unix.Open(filepath.Join(netnsDir, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", name, err)
	}
	defer unix.Close(target)

	runtime.LockOSThread()
	// thread-self, not self: /proc/self/ns/net is the main thread's namespace, which is not
	// necessarily this thread's.
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current netns: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", name, err)
	}
	// Deferred so that the thread also goes back when fn panics.
	defer func() {
		if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
			err = errors.Join(err, fmt.Errorf("return from netns %s, thread left locked: %w", name, serr))
			return
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}

// Listen listens inside the server namespace, like net.Listen. addr must have a literal IP
// address or an empty host, e.g. "[::]:0" or p.ServerAddr.String()+":8080".
//
// The listener and every connection it accepted are closed in the test's cleanup, before
// the namespaces go: a namespace lives on, unnamed, as long as a socket in it is open, and
// a forgotten server socket could keep retransmitting into a later test's trace.
//
// TCP listeners are plain TCP: Go 1.24 and later listen with Multipath TCP by default, and
// a kernel test should see the TCP sockets it is about.
func (p *Pair) Listen(network, addr string) (net.Listener, error) {
	if err := requireLiteral(addr); err != nil {
		return nil, fmt.Errorf("listen on %s in %s: %w", addr, p.ServerNS, err)
	}
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	var l net.Listener
	err := p.InServer(func() error {
		var err error
		l, err = lc.Listen(context.Background(), network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s in %s: %w", addr, p.ServerNS, err)
	}
	tl := &listener{Listener: l}
	p.tb.Cleanup(tl.closeAll)
	return tl, nil
}

// listener remembers the connections it accepted, so that cleanup can close them.
type listener struct {
	net.Listener

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// Accept accepts a connection and remembers it.
func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns = append(l.conns, c)
	return c, nil
}

func (l *listener) closeAll() {
	l.Listener.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for _, c := range l.conns {
		c.Close()
	}
}

// Dial connects from the client namespace, like net.Dialer.DialContext: the socket is
// created inside the namespace. addr must have a literal IP address, e.g.
// netip.AddrPortFrom(p.ServerAddr6, port).String(). The connection is closed in the
// test's cleanup if it is still open. For socket options such as TCP_SYNCNT, call a
// net.Dialer with a Control function inside InClient instead.
func (p *Pair) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := requireLiteral(addr); err != nil {
		return nil, fmt.Errorf("dial %s from %s: %w", addr, p.ClientNS, err)
	}
	var d net.Dialer
	var c net.Conn
	err := p.InClient(func() error {
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: %w", addr, p.ClientNS, err)
	}
	p.tb.Cleanup(func() { c.Close() })
	return c, nil
}

// requireLiteral rejects host names: resolving them may happen on other goroutines, and
// so in the wrong namespace.
func requireLiteral(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return nil
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return fmt.Errorf("host %q is not a literal IP address", host)
	}
	return nil
}

// ClientCmd returns a command that runs name inside the client namespace, through
// ip netns exec.
func (p *Pair) ClientCmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	return netnsCmd(ctx, p.ClientNS, name, args...)
}

// ServerCmd returns a command that runs name inside the server namespace, through
// ip netns exec.
func (p *Pair) ServerCmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	return netnsCmd(ctx, p.ServerNS, name, args...)
}

func netnsCmd(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// Sysctl sets a sysctl inside one of the Pair's namespaces, e.g.
// p.Sysctl(p.ClientNS, "net.ipv4.tcp_syn_retries", "1"). Only net.* keys are accepted:
// other keys are global and would change the host, while a net.* key that is not per
// namespace does not exist inside a new namespace, so setting it fails.
func (p *Pair) Sysctl(ns, key, value string) error {
	if ns != p.ClientNS && ns != p.ServerNS {
		return fmt.Errorf("set %s in %s: not a namespace of this pair", key, ns)
	}
	if !strings.HasPrefix(key, "net.") {
		return fmt.Errorf("set %s in %s: not a net.* key, so not confined to the namespace", key, ns)
	}
	// The same mapping as sysctl(8): dots separate levels, and a slash stands for a dot
	// inside a name, such as an interface name with a dot in it.
	path := "/proc/sys/" + strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, key)
	// /proc/sys/net shows the namespace of the thread that looks, so writing from inside
	// the namespace is all it takes.
	err := inNetns(ns, func() error {
		return os.WriteFile(path, []byte(value), 0)
	})
	if err != nil {
		return fmt.Errorf("set %s=%s in %s: %w", key, value, ns, err)
	}
	return nil
}
