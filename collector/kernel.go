package collector

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// KernelHZ returns CONFIG_HZ, which converts icsk_rto (jiffies) into time.
// It reads the kernel config, else measures jiffies against the monotonic
// clock in /proc/timer_list.
func KernelHZ() (uint32, error) {
	if hz, err := hzFromConfig(); err == nil {
		return hz, nil
	}
	return hzFromTimerList()
}

func hzFromConfig() (uint32, error) {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return 0, err
	}
	release := unix.ByteSliceToString(uts.Release[:])
	for _, path := range []string{"/proc/config.gz", "/boot/config-" + release} {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		var r io.Reader = f
		if strings.HasSuffix(path, ".gz") {
			zr, err := gzip.NewReader(f)
			if err != nil {
				f.Close()
				continue
			}
			r = zr
		}
		hz, err := scanHZ(r)
		f.Close()
		if err == nil {
			return hz, nil
		}
	}
	return 0, errors.New("no kernel config with CONFIG_HZ")
}

func scanHZ(r io.Reader) (uint32, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CONFIG_HZ="); ok {
			hz, err := strconv.ParseUint(v, 10, 32)
			if err != nil || hz == 0 {
				return 0, fmt.Errorf("parse CONFIG_HZ=%q", v)
			}
			return uint32(hz), nil
		}
	}
	return 0, errors.New("CONFIG_HZ not found")
}

// hzFromTimerList samples "now at N nsecs" and "jiffies: J" twice and
// rounds the rate to the nearest HZ a kernel can be built with.
func hzFromTimerList() (uint32, error) {
	sample := func() (ns, j uint64, err error) {
		b, err := os.ReadFile("/proc/timer_list")
		if err != nil {
			return 0, 0, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "now at "); ok && ns == 0 {
				ns, _ = strconv.ParseUint(strings.TrimSuffix(v, " nsecs"), 10, 64)
			}
			if v, ok := strings.CutPrefix(line, "jiffies: "); ok && j == 0 {
				j, _ = strconv.ParseUint(v, 10, 64)
			}
		}
		if ns == 0 || j == 0 {
			return 0, 0, errors.New("no clock lines in /proc/timer_list")
		}
		return ns, j, nil
	}
	ns1, j1, err := sample()
	if err != nil {
		return 0, fmt.Errorf("measure HZ: %w", err)
	}
	time.Sleep(200 * time.Millisecond)
	ns2, j2, err := sample()
	if err != nil || ns2 <= ns1 {
		return 0, fmt.Errorf("measure HZ: %w", err)
	}
	rate := float64(j2-j1) / (float64(ns2-ns1) / 1e9)
	best, bestDiff := uint32(0), 1e18
	for _, hz := range []uint32{100, 250, 300, 1000} {
		if d := abs(rate - float64(hz)); d < bestDiff {
			best, bestDiff = hz, d
		}
	}
	return best, nil
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// KallsymsAddr returns a kernel symbol's address, or 0 when it is absent or
// hidden (kptr_restrict).
func KallsymsAddr(name string) (uint64, error) {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[2] != name {
			continue
		}
		addr, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			return 0, fmt.Errorf("parse kallsyms address of %s: %w", name, err)
		}
		return addr, nil
	}
	return 0, sc.Err()
}

// MonoOffset returns wall-clock time minus CLOCK_MONOTONIC, the offset that
// turns bpf_ktime_get_ns() into wall time.
func MonoOffset() time.Duration {
	var ts unix.Timespec
	before := time.Now()
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	after := time.Now()
	wall := before.Add(after.Sub(before) / 2)
	return time.Duration(wall.UnixNano() - ts.Nano())
}

// KernelRelease returns uname -r.
func KernelRelease() string {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(uts.Release[:])
}
