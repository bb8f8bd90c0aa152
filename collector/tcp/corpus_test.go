package tcp

import (
	"context"
	"flag"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/lab/fuzzcorpus"
	"github.com/timeout-tracer/tracer/lab/netlab"
)

var writeCorpus = flag.Bool("corpus.write", false, "capture real kernel records into the fuzzers' testdata/fuzz corpora (root, fault lab)")

// TestCaptureTCPCorpus writes FuzzDecodeTCP's corpus: ring buffer samples
// exactly as this kernel wrote them while the lab made connects, round
// trips (activity), a blackhole (TLP, RTOs), a refused connect and
// closes, over IPv4 and IPv6. Run with -corpus.write (root).
func TestCaptureTCPCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("captures the fuzz corpus only with -corpus.write")
	}
	requireTracing(t)
	kindOff := unsafe.Offsetof(tcpTtTcpEvent{}.Kind)
	s := fuzzcorpus.Samples{Per: 2}
	p := netlab.NewPair(t)
	c := startCollector(t, Config{Lifecycle: true, ActivityInterval: time.Millisecond, tap: func(raw []byte) {
		key := "short"
		if uintptr(len(raw)) > kindOff {
			key = event.TCPKind(raw[kindOff]).String()
		}
		s.Add(key, raw)
	}})
	for _, addr := range []netip.Addr{p.ServerAddr, p.ServerAddr6} {
		srv := serve(t, p, addr, false)
		conn, err := p.Dial(context.Background(), "tcp", srv.String())
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, conn)
		roundTrip(t, conn)
		conn.Close()
	}
	srv := netip.AddrPortFrom(p.ServerAddr, labPort)
	conn, err := p.Dial(context.Background(), "tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, conn)
	if err := p.Blackhole(labPort); err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("lost"))
	evs := collect(t, c, addrPort(t, conn.LocalAddr()), srv, 8*time.Second, func(e []event.TCP) bool { return count(e, event.TCPRTO) >= 2 })
	conn.Close()
	p.Dial(context.Background(), "tcp", netip.AddrPortFrom(p.ServerAddr, 9).String()) // refused
	time.Sleep(300 * time.Millisecond)
	if count(evs, event.TCPRTO) < 2 {
		t.Fatalf("no RTOs captured: %s", kinds(evs))
	}
	s.Write(t, "FuzzDecodeTCP")
}
