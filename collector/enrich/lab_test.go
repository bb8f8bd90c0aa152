package enrich

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/lab/netlab"
	"github.com/timeout-tracer/tracer/lab/testenv"
)

// The enrichment's test makes real traffic between two network namespaces
// and blackholes it (the same lab as the tcp collector's tests).

const labPort = 8080

// requireTracing is the one skip helper of the kernel tests.
func requireTracing(t *testing.T) {
	t.Helper()
	testenv.Root(t)
	if err := collector.Preflight(); err != nil {
		t.Skipf("kernel tracing unavailable: %v", err)
	}
}

// serve echoes what the server side reads.
func serve(t *testing.T, p *netlab.Pair, addr netip.Addr) netip.AddrPort {
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
			go func() {
				defer conn.Close()
				io.Copy(conn, conn)
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
