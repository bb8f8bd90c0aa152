package sample

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/lab/cpulab"
	"github.com/timeout-tracer/tracer/lab/testenv"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The three layouts a node can have: cpu on v1 (this machine), pure v2,
// and hybrid with cpu on v2 under "unified".
func TestCgroupCPUDirFindsTheCPUController(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"v1/cpu,cpuacct/kubepods/pod1/cpu.stat":         "nr_periods 1\nnr_throttled 0\nthrottled_time 0\n",
		"v2/kubepods/pod1/cpu.stat":                     "usage_usec 5\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
		"hybrid/unified/kubepods/pod1/cpu.stat":         "usage_usec 5\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
		"nocpu/unified/kubepods/pod1/cpu.stat":          "usage_usec 5\n", // v2 without the cpu controller
		"hybrid/cpu,cpuacct/kubepods/pod1/cpu.stat.bak": "",
	})
	for _, c := range []struct {
		name, root, procCgroup, want string
		v2                           bool
	}{
		{"v1", "v1", "12:memory:/kubepods/pod1\n3:cpu,cpuacct:/kubepods/pod1\n0::/\n", "v1/cpu,cpuacct/kubepods/pod1", false},
		{"v2", "v2", "0::/kubepods/pod1\n", "v2/kubepods/pod1", true},
		{"hybrid", "hybrid", "3:cpu,cpuacct:/\n0::/kubepods/pod1\n", "hybrid/unified/kubepods/pod1", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, v2, err := cgroupCPUDir(filepath.Join(root, c.root), []byte(c.procCgroup))
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(root, c.want); dir != want || v2 != c.v2 {
				t.Errorf("got %s v2=%v, want %s v2=%v", dir, v2, want, c.v2)
			}
		})
	}
	if _, _, err := cgroupCPUDir(filepath.Join(root, "nocpu"), []byte("0::/kubepods/pod1\n")); err == nil {
		t.Error("a v2 hierarchy without the cpu controller was accepted")
	}
}

// sample caps a level's throttled time at periods × period (the kernel
// sums it over CPUs) and takes the largest level, not the sum.
func TestThrottleSampleCapsAndTakesTheLargestLevel(t *testing.T) {
	root := t.TempDir()
	stat := func(nr, thrNs int) string {
		return "nr_periods 50\nnr_throttled " + strconv.Itoa(nr) + "\nthrottled_time " + strconv.Itoa(thrNs) + "\n"
	}
	writeFiles(t, root, map[string]string{
		"cpu/a/cpu.stat": stat(0, 0), "cpu/a/cpu.cfs_quota_us": "20000\n", "cpu/a/cpu.cfs_period_us": "100000\n",
		"cpu/a/b/cpu.stat": stat(0, 0), "cpu/a/b/cpu.cfs_quota_us": "-1\n", "cpu/a/b/cpu.cfs_period_us": "100000\n",
	})
	levels := []*level{{dir: filepath.Join(root, "cpu/a/b")}, {dir: filepath.Join(root, "cpu/a")}}
	tr := &Throttle{reads: NewCgroupReads()}
	if _, _, err := tr.sample(levels, true); err != nil {
		t.Fatal(err)
	}
	// Two CPUs throttled for 80 ms in each of 2 periods: 320 ms summed,
	// at most 200 ms of wall time.
	writeFiles(t, root, map[string]string{"cpu/a/cpu.stat": stat(2, 320e6), "cpu/a/b/cpu.stat": stat(1, 10e6)})
	lost, n, err := tr.sample(levels, false)
	if err != nil {
		t.Fatal(err)
	}
	if lost != 200*time.Millisecond || n != 2 {
		t.Errorf("lost %v in %d periods, want 200ms in 2", lost, n)
	}
	// A counter that went back (the cgroup recreated) is a new baseline.
	writeFiles(t, root, map[string]string{"cpu/a/cpu.stat": stat(0, 0), "cpu/a/b/cpu.stat": stat(1, 10e6)})
	if lost, _, _ := tr.sample(levels, false); lost != 0 {
		t.Errorf("lost %v after a reset, want 0", lost)
	}
	if _, _, err := parseCPUStat([]byte("usage_usec 5\n"), true); err == nil {
		t.Error("a cpu.stat without throttling figures was accepted")
	}
}

func TestStartThrottleRejectsAMissingProcess(t *testing.T) {
	if _, err := StartThrottle(ThrottleConfig{PID: 1 << 30}); err == nil {
		t.Fatal("a pid that does not exist was accepted")
	}
}

// A real cgroup with a 20 % quota and a process that burns CPU in it: the
// sampler reports throttled time, about what the cgroup's own counter says.
func TestThrottleOfABurnerInATightCgroup(t *testing.T) {
	testenv.Root(t)
	cg, err := cpulab.NewCgroup("tt-collector-throttle", 20*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		t.Skipf("no cgroup with a CPU quota here: %v", err)
	}
	t.Cleanup(func() {
		if err := cg.Remove(); err != nil {
			t.Error(err)
		}
	})
	burner := exec.Command("sh", "-c", "while :; do :; done")
	if err := burner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { burner.Process.Kill(); burner.Wait() })
	if err := cg.Add(burner.Process.Pid); err != nil {
		t.Fatal(err)
	}
	tr, err := StartThrottle(ThrottleConfig{PID: burner.Process.Pid, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	before, err := cg.Throttled()
	if err != nil {
		t.Fatal(err)
	}
	var sum time.Duration
	var watching bool
	deadline := time.After(10 * time.Second)
	for sum < 500*time.Millisecond {
		select {
		case ev := <-tr.Events():
			if ev.Kind != event.LocalThrottled || ev.PID != uint32(burner.Process.Pid) || ev.Start > ev.Mono {
				t.Fatalf("bad event %+v", ev)
			}
			if ev.Lost == 0 {
				watching = true
				continue
			}
			if ev.Lost > time.Duration(ev.Mono-ev.Start) {
				t.Errorf("lost %v in an interval of %v", ev.Lost, time.Duration(ev.Mono-ev.Start))
			}
			sum += ev.Lost
		case <-deadline:
			t.Fatalf("only %v throttled time reported in 10 s", sum)
		}
	}
	tr.Close()
	after, _ := cg.Throttled()
	st := tr.Stats()
	t.Logf("reported %v throttled; the cgroup counted %v meanwhile; %+v", sum, after-before, st)
	if !watching {
		t.Error("no zero-length interval at the start: the correlator cannot tell the source is watching")
	}
	if sum > after-before+100*time.Millisecond {
		t.Errorf("reported %v, more than the cgroup's own %v", sum, after-before)
	}
	if st.Dir != cg.Dir {
		t.Errorf("read %s, want %s", st.Dir, cg.Dir)
	}
}
