package netlab

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestBlackhole checks that a blackhole makes an established connection retransmit
// without an answer, and that ClearFaults lets it recover.
func TestBlackhole(t *testing.T) {
	for _, network := range families {
		t.Run(network, func(t *testing.T) {
			t.Parallel()
			p := NewPair(t)
			addr := startEcho(t, p, network, 0)
			c := dial(t, p, network, addr)
			if err := roundTrip(c, []byte("before"), 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := p.Blackhole(int(addr.Port())); err != nil {
				t.Fatal(err)
			}
			err := roundTrip(c, []byte("during"), time.Second)
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("round trip through the blackhole: got %v, want a deadline error", err)
			}
			if n := totalRetrans(t, c); n == 0 {
				t.Error("no retransmissions through the blackhole")
			}
			if err := p.ClearFaults(); err != nil {
				t.Fatal(err)
			}
			// The next retransmission goes through; the backoff is at most a few seconds
			// this early.
			if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len("during"))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != "during" {
				t.Fatalf("read after ClearFaults: %q, %v", got, err)
			}
		})
	}
}

// TestLoss checks that random loss drops some segments but not all: the connection
// retransmits and still delivers.
func TestLoss(t *testing.T) {
	for _, network := range families {
		t.Run(network, func(t *testing.T) {
			t.Parallel()
			p := NewPair(t)
			addr := startEcho(t, p, network, 0)
			c := dial(t, p, network, addr)
			if err := p.Loss(int(addr.Port()), 0.3); err != nil {
				t.Fatal(err)
			}
			// Each round trip sends at least one segment to the port, so a retransmission
			// is all but certain within 100 (0.7^100 ≈ 3e-16), and seven losses in a row
			// (0.3^7 ≈ 2e-4) are needed to exhaust the deadline.
			for i := 0; totalRetrans(t, c) == 0; i++ {
				if i == 100 {
					t.Fatal("100 round trips at 30% loss without a retransmission")
				}
				if err := roundTrip(c, []byte("lossy"), 30*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			if err := roundTrip(c, []byte("after a loss"), 30*time.Second); err != nil {
				t.Fatal(err)
			}
			for _, bad := range []float64{0, -0.1, 1.5} {
				if err := p.Loss(int(addr.Port()), bad); err == nil {
					t.Errorf("Loss accepted probability %v", bad)
				}
			}
		})
	}
}

// TestRejectReset checks that an established connection is reset and a new one refused.
func TestRejectReset(t *testing.T) {
	for _, network := range families {
		t.Run(network, func(t *testing.T) {
			t.Parallel()
			p := NewPair(t)
			addr := startEcho(t, p, network, 0)
			c := dial(t, p, network, addr)
			if err := roundTrip(c, []byte("before"), 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := p.RejectReset(int(addr.Port())); err != nil {
				t.Fatal(err)
			}
			wantErrno(t, roundTrip(c, []byte("reset"), 5*time.Second), unix.ECONNRESET)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := p.Dial(ctx, network, addr.String())
			wantErrno(t, err, unix.ECONNREFUSED)
		})
	}
}

// TestDropSYN checks that dropped SYNs make connects time out after the client's SYN
// retries, set either for the namespace or for the socket, while established connections
// carry on.
func TestDropSYN(t *testing.T) {
	for _, network := range families {
		for _, how := range []string{"sysctl", "TCP_SYNCNT"} {
			t.Run(network+"/"+how, func(t *testing.T) {
				t.Parallel()
				p := NewPair(t)
				addr := startEcho(t, p, network, 0)
				established := dial(t, p, network, addr)
				if err := p.DropSYN(int(addr.Port())); err != nil {
					t.Fatal(err)
				}
				var d net.Dialer
				switch how {
				case "sysctl":
					if err := p.Sysctl(p.ClientNS, "net.ipv4.tcp_syn_retries", "1"); err != nil {
						t.Fatal(err)
					}
				case "TCP_SYNCNT":
					d.Control = func(_, _ string, rc syscall.RawConn) error {
						var serr error
						err := rc.Control(func(fd uintptr) {
							serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_SYNCNT, 1)
						})
						return errors.Join(err, serr)
					}
				}
				// Far beyond one retry, so that only the kernel can end the connect.
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				start := time.Now()
				err := p.InClient(func() error {
					c, err := d.DialContext(ctx, network, addr.String())
					if err == nil {
						c.Close()
					}
					return err
				})
				wantErrno(t, err, unix.ETIMEDOUT)
				t.Logf("connect timed out after %v", time.Since(start).Round(time.Millisecond))
				if err := roundTrip(established, []byte("still here"), 5*time.Second); err != nil {
					t.Errorf("established connection during the SYN drop: %v", err)
				}
			})
		}
	}
}

// TestShape checks that tbf slows the server's sends and that ClearFaults removes it.
func TestShape(t *testing.T) {
	p := NewPair(t)
	const size = 128 << 10
	l, err := p.Listen("tcp4", netip.AddrPortFrom(p.ServerAddr, 0).String())
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
				c.Write(make([]byte, size))
			}()
		}
	}()
	addr := netip.MustParseAddrPort(l.Addr().String())
	download := func() time.Duration {
		t.Helper()
		c := dial(t, p, "tcp4", addr)
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		start := time.Now()
		n, err := io.Copy(io.Discard, c)
		if err != nil || n != size {
			t.Fatalf("download: %d bytes, %v", n, err)
		}
		return time.Since(start)
	}
	if err := p.Shape("1mbit", "8k", "400ms"); err != nil {
		t.Fatal(err)
	}
	qdiscs, err := exec.Command("tc", "-n", p.ServerNS, "qdisc", "show", "dev", p.ServerDev).CombinedOutput()
	if err != nil || !strings.Contains(string(qdiscs), "tbf") {
		t.Fatalf("no tbf on %s: %s %v", p.ServerDev, qdiscs, err)
	}
	// 128 KiB at 1 Mbit/s take about 1.05 s.
	if d := download(); d < 700*time.Millisecond {
		t.Errorf("shaped download took %v, want at least 700ms", d)
	}
	if err := p.ClearFaults(); err != nil {
		t.Fatal(err)
	}
	if d := download(); d > 500*time.Millisecond {
		t.Errorf("download after ClearFaults took %v, want well under 500ms", d)
	}
	// ClearFaults with nothing to clear is fine.
	if err := p.ClearFaults(); err != nil {
		t.Fatal(err)
	}
}

func TestFaultRulesAreInTheServerNamespace(t *testing.T) {
	p := NewPair(t)
	hostRules := func() string {
		out, err := exec.Command("iptables", "-w", "-S", "INPUT").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -S on the host: %v: %s", err, out)
		}
		return string(out)
	}
	before := hostRules()
	if err := p.DropSYN(4242); err != nil {
		t.Fatal(err)
	}
	if err := p.Blackhole(0); err == nil {
		t.Error("Blackhole accepted port 0")
	}
	for _, bin := range []string{"iptables", "ip6tables"} {
		out, err := p.ServerCmd(context.Background(), bin, "-w", "-S", "INPUT").CombinedOutput()
		if err != nil {
			t.Fatalf("%s -S in %s: %v: %s", bin, p.ServerNS, err, out)
		}
		if !strings.Contains(string(out), "--dport 4242") {
			t.Errorf("%s in %s lacks the rule:\n%s", bin, p.ServerNS, out)
		}
	}
	if after := hostRules(); after != before {
		t.Errorf("host rules changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
