package collector

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/lab/fuzzcorpus"
	"github.com/timeout-tracer/tracer/lab/netlab"
	"github.com/timeout-tracer/tracer/lab/testprog"
)

var writeCorpus = flag.Bool("corpus.write", false, "capture real kernel records into the fuzzers' testdata/fuzz corpora (root, fault lab)")

// samples keeps at most per raw samples for each key (the record's kind),
// so a corpus holds each kind of record the kernel wrote a few times.
type samples struct {
	mu   sync.Mutex
	per  int
	seen map[string][][]byte
}

func (s *samples) add(key string, raw []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string][][]byte{}
	}
	if len(s.seen[key]) < s.per {
		s.seen[key] = append(s.seen[key], append([]byte(nil), raw...))
	}
}

func (s *samples) write(t *testing.T, fuzzName string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, raws := range s.seen {
		for _, raw := range raws {
			if err := fuzzcorpus.Write("testdata/fuzz", fuzzName, key, raw); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%s: %d kinds of record", fuzzName, len(s.seen))
}

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
	var s samples
	s.per = 2
	p := netlab.NewPair(t)
	c := startCollector(t, Config{Lifecycle: true, ActivityInterval: time.Millisecond, tap: func(raw []byte) {
		key := "short"
		if uintptr(len(raw)) > kindOff {
			key = event.TCPKind(raw[kindOff]).String()
		}
		s.add(key, raw)
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
	s.write(t, "FuzzDecodeTCP")
}

// TestCaptureGoCorpus writes FuzzDecodeDeadline's and FuzzDecodeCall's
// corpora: the deadline and binding records the Go probes wrote while the
// deadlines test program ran with the detail tier on (timer fired and
// expired at creation, with and without creation details; net/http round
// trips with their connection). Run with -corpus.write (root).
func TestCaptureGoCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("captures the fuzz corpus only with -corpus.write")
	}
	requireTracing(t)
	var evs, binds samples
	evs.per, binds.per = 2, 3
	kindOff := unsafe.Offsetof(godeadlineTtGoEvent{}.Kind)
	createdOff := unsafe.Offsetof(godeadlineTtGoEvent{}.CreatedNs)
	bkindOff := unsafe.Offsetof(godeadlineTtGoBinding{}.Kind)
	tap := func(ring string, raw []byte) {
		switch ring {
		case "go_events":
			key := "short"
			if uintptr(len(raw)) >= createdOff+8 {
				key = event.ExpiryKind(raw[kindOff]).String()
				if raw[createdOff] != 0 || raw[createdOff+7] != 0 {
					key += "-detail"
				}
			}
			evs.add(key, raw)
		case "go_bindings":
			key := "short"
			if uintptr(len(raw)) > bkindOff {
				key = fmt.Sprintf("binding-kind%d", raw[bkindOff])
			}
			binds.add(key, raw)
		}
	}
	// Once with the cold tier alone, once with the detail tier too.
	for _, detail := range []bool{false, true} {
		runDeadlines(t, detail, tap)
	}
	evs.write(t, "FuzzDecodeDeadline")
	binds.write(t, "FuzzDecodeCall")
}

// runDeadlines runs the deadlines program once under the Go probes.
func runDeadlines(t *testing.T, detail bool, tap func(string, []byte)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testprog.Path(t, "deadlines"), "-rounds", "3")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	br := bufio.NewReader(stdout)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("target not ready: %q %v", line, err)
	}
	p, err := StartGo(GoConfig{PID: cmd.Process.Pid, PollInterval: 20 * time.Millisecond, tap: tap})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, drain := range []func(){
		func() {
			for range p.Calls() {
			}
		},
		func() {
			for range p.Events() {
			}
		},
		func() {
			for range p.Bindings() {
			}
		},
	} {
		go drain()
	}
	if err := p.SetDetail(detail); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	if _, err := br.ReadString('\n'); err != nil { // the target's own counts
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
}
