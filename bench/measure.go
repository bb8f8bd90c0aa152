package bench

import (
	"fmt"
	"math"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime is the process's user+system CPU time: probe traps and BPF
// programs run in the process's context are charged here.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssBytes is the process's resident set size now.
func rssBytes() int64 { return statusBytes("/proc/self/status", "VmRSS:") }

// statusBytes reads a "Field:   N kB" line of a /proc status file, in
// bytes; 0 when it is not there.
func statusBytes(path, field string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// bulk is one timed loopback transfer: bytes moved and CPU spent.
type bulk struct {
	bytes int64
	wall  time.Duration
	cpu   time.Duration
}

func (b bulk) mbps() float64 { return float64(b.bytes) / b.wall.Seconds() / 1e6 }

// cpuPerMB is CPU nanoseconds per megabyte moved (client and server are in
// this process, so both sides' hook costs count).
func (b bulk) cpuPerMB() float64 { return float64(b.cpu.Nanoseconds()) / (float64(b.bytes) / 1e6) }

// runBulk sends over a fresh loopback connection for d, with writes of
// chunk bytes, and reads on the other side.
func runBulk(d time.Duration, chunk int) (bulk, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return bulk{}, err
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- 0
			return
		}
		// Read with a large buffer, as bulk receivers do (io.Discard would
		// read 8 KiB at a time and multiply the receive hook's hits).
		buf := make([]byte, 256*1024)
		var n int64
		for {
			m, err := c.Read(buf)
			n += int64(m)
			if err != nil {
				break
			}
		}
		c.Close()
		got <- n
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return bulk{}, err
	}
	buf := make([]byte, chunk)
	cpu0, t0 := cpuTime(), time.Now()
	for time.Since(t0) < d {
		if _, err := conn.Write(buf); err != nil {
			conn.Close()
			return bulk{}, err
		}
	}
	conn.Close()
	n := <-got
	return bulk{bytes: n, wall: time.Since(t0), cpu: cpuTime() - cpu0}, nil
}

// abRatio is the median of the per-round ratios on/off of an alternated
// run, and the A/A noise: the median distance from 1 of the ratios of
// consecutive "off" rounds, which differ only by chance.
func abRatio(off, on []float64) (ratio, noise float64) {
	var r, aa []float64
	for i := range off {
		r = append(r, on[i]/off[i])
		if i > 0 {
			aa = append(aa, math.Abs(off[i]/off[i-1]-1))
		}
	}
	return median(r), median(aa)
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func verdict(ratio, noise, target float64) string {
	switch {
	case ratio >= target:
		return "meets target"
	case 1-ratio < noise:
		return "inconclusive (effect below the A/A spread)"
	default:
		return "MISSES target"
	}
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", f*100) }
