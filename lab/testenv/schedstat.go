package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Schedstat is one thread's line of /proc/PID/task/TID/schedstat: the
// scheduler's own account of the time it spent runnable without a CPU
// (run_delay) and of how many times it got one (timeslices). The tests
// score the run-queue figures against it.
type Schedstat struct {
	RunDelay time.Duration
	Slices   int64
}

// Schedstats reads every thread of process pid, by thread id; a thread
// that exits during the read is left out.
func Schedstats(pid int) map[int]Schedstat {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/schedstat")
	out := make(map[int]Schedstat, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		fs := strings.Fields(string(b))
		if len(fs) < 3 {
			continue
		}
		tid, err1 := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		delay, err2 := strconv.ParseInt(fs[1], 10, 64)
		slices, err3 := strconv.ParseInt(fs[2], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil {
			out[tid] = Schedstat{RunDelay: time.Duration(delay), Slices: slices}
		}
	}
	return out
}
