package goprobe

import (
	"bufio"
	"compress/gzip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestDeriveHZ(t *testing.T) {
	at := func(hz uint64, sec float64, skewTicks float64) (uint64, uint64) {
		j := float64(1<<32) - 300*float64(hz) + float64(hz)*sec + skewTicks
		return uint64(j), uint64(sec * 1e9)
	}
	for _, tc := range []struct {
		hz   uint64
		sec  float64
		skew float64
		want uint64
	}{
		{250, 3600, 0, 250},
		{1000, 86400 * 30, 500, 1000},
		{100, 7200, -150, 100},
		{300, 1000, 10, 300},
		// Near the 300 s mark every candidate predicts about the same.
		{250, 300.5, 0, 0},
	} {
		j, mono := at(tc.hz, tc.sec, tc.skew)
		if got := deriveHZ(j, mono); got != tc.want {
			t.Errorf("HZ %d at %.0f s (skew %.0f ticks): derived %d, want %d", tc.hz, tc.sec, tc.skew, got, tc.want)
		}
	}
	if got := deriveHZ(0, 1e12); got != 0 {
		t.Errorf("no jiffies: %d", got)
	}
}

// TestDeriveHZHere: this kernel's jiffies (/proc/timer_list) and monotonic
// clock give the HZ its config says.
func TestDeriveHZHere(t *testing.T) {
	want := configHZ(t)
	f, err := os.Open("/proc/timer_list")
	if err != nil {
		t.Skipf("no /proc/timer_list: %v", err)
	}
	defer f.Close()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "jiffies: "); ok {
			j, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if got := hzOf(j, uint64(ts.Nano())); got != want {
				t.Fatalf("HZ %d from jiffies %d at %d ns, the config says %d", got, j, ts.Nano(), want)
			}
			if ts.Nano() < int64(10*time.Minute) {
				t.Skipf("booted %s ago: deriveHZ alone does not tell the tick apart before ~8 minutes after boot (the config did)", time.Duration(ts.Nano()).Round(time.Second))
			}
			if got := deriveHZ(j, uint64(ts.Nano())); got != want {
				t.Fatalf("derived HZ %d from jiffies %d at %d ns, the config says %d", got, j, ts.Nano(), want)
			}
			return
		}
	}
	t.Skip("no jiffies line in /proc/timer_list")
}

func configHZ(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		t.Skipf("no kernel config to compare with: %v", err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CONFIG_HZ="); ok {
			hz, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return hz
		}
	}
	t.Skip("no CONFIG_HZ in the kernel config")
	return 0
}
