package correlate

import (
	"math/rand/v2"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/event"
)

// syntheticStream builds n events shaped like a busy node: 40 processes
// with 100 sockets each; ~55 % activity samples (half in the collector's
// TCP form), ~30 % TCP events (retransmits on the tenth of sockets that
// are lossy, connection churn), ~15 % bindings, 0.2 % expired deadlines
// (half with detail), at ~17 k events/s of stream time (the storm rate
// measured on the development machines).
func syntheticStream(n int) []event.Any {
	const (
		pids        = 40
		socksPerPID = 100
		nsPerEvent  = 60_000
	)
	rng := rand.New(rand.NewPCG(1, 2))
	evs := make([]event.Any, 0, n)
	cookies := make([]uint64, pids*socksPerPID)
	next := uint64(1)
	for i := range cookies {
		cookies[i] = next
		next++
	}
	peer := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 213, byte(i / 256), byte(i)}), 8080)
	}
	local := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 213, 0, 1}), uint16(30000+i%30000))
	}
	goidOf := func(sock int) uint64 { return uint64(1000 + sock%5000) }
	t := baseMono
	for len(evs) < n {
		t += uint64(rng.IntN(2 * nsPerEvent))
		sock := rng.IntN(len(cookies))
		pid := uint32(1000 + sock/socksPerPID)
		ck := cookies[sock]
		switch r := rng.IntN(1000); {
		case r < 275:
			evs = append(evs, &event.SockActivity{Mono: t, PID: pid, Cookie: ck, Local: local(sock), Peer: peer(sock),
				Goid: goidOf(sock), Sent: r%2 == 0, Received: r%2 == 1})
		case r < 550:
			evs = append(evs, &event.TCP{Mono: t, Kind: event.TCPActivity, PID: pid, Cookie: ck, Local: local(sock),
				Peer: peer(sock), Goid: goidOf(sock), Sent: r%2 == 0})
		case r < 800:
			kind := event.TCPFastRetransmit
			switch {
			case sock%10 != 0: // healthy sockets: lifecycle only, a close in ten
				kind = event.TCPEstablished
				if r%10 == 0 {
					kind = event.TCPClose
				}
			case r%5 == 0:
				kind = event.TCPRTO
			case r%5 == 1:
				kind = event.TCPTLP
			}
			e := &event.TCP{Mono: t, Kind: kind, PID: pid, Cookie: ck, Local: local(sock), Peer: peer(sock),
				State: 1, SRTT: 100 * time.Microsecond, RTO: 204 * time.Millisecond}
			evs = append(evs, e)
			if kind == event.TCPClose { // churn: the next connection gets a new cookie
				cookies[sock] = next
				next++
			}
		case r < 998:
			src := event.BindKernelG
			if r%2 == 0 {
				src = event.BindHTTPRoundTrip
			}
			evs = append(evs, &event.Binding{Mono: t, PID: pid, Goid: goidOf(sock), Cookie: ck, Source: src})
		default:
			d := &event.Deadline{Mono: t, PID: pid, Kind: event.TimerFired, Goid: 7}
			if r%2 == 0 {
				d.Detail, d.CreatedMono, d.CreatedGoid = true, t-300_000_000, goidOf(sock)
			}
			evs = append(evs, d)
		}
	}
	return evs
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCorrelator pushes a 1M-event synthetic stream through a fresh
// correlator per iteration and reports events/s on one core (GOMAXPROCS=1
// for the run: the garbage collector gets no second CPU) and allocations
// per event (target: ≥ 2M events/s, well under one allocation per event —
// only new sockets, goroutines and reports allocate).
//
// The mix is a busy node's (see syntheticStream): mostly activity samples
// and TCP events, some bindings, few deadlines (0.2 %). Reports are
// still about half the cost: half the deadlines carry no detail, and
// each of those examines every socket its process used in the 10 s
// before it (about two hundred here, closed ones included, with the
// connection churn).
func BenchmarkCorrelator(b *testing.B) {
	benchStream(b, syntheticStream(1_000_000))
}

// BenchmarkCorrelatorNoDeadlines is the same stream without its deadlines:
// the per-event path alone, without the reports' cost.
func BenchmarkCorrelatorNoDeadlines(b *testing.B) {
	var evs []event.Any
	for _, ev := range syntheticStream(1_000_000) {
		if _, ok := ev.(*event.Deadline); !ok {
			evs = append(evs, ev)
		}
	}
	benchStream(b, evs)
}

func benchStream(b *testing.B, evs []event.Any) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var ms0, ms1 runtime.MemStats
	var events, reports uint64
	var elapsed, cpu time.Duration
	for b.Loop() {
		runtime.ReadMemStats(&ms0)
		cpu0 := cpuTime()
		start := time.Now()
		c, _ := New(Config{})
		for _, ev := range evs {
			reports += uint64(len(c.Push(ev)))
		}
		reports += uint64(len(c.Flush()))
		elapsed += time.Since(start)
		cpu += cpuTime() - cpu0
		runtime.ReadMemStats(&ms1)
		events += uint64(len(evs))
		b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(len(evs)), "allocs/event")
	}
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
	// On a shared machine wall time includes waiting for the CPU: the
	// process's own CPU time says what the correlator costs.
	b.ReportMetric(float64(events)/cpu.Seconds(), "events/cpu-s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(events), "ns/event")
	b.ReportMetric(float64(reports)/float64(events)*1e6, "reports/1Mevents")
	b.ReportMetric(float64(reports)/elapsed.Seconds(), "reports/s")
}
