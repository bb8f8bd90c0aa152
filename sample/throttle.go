// Package sample reads local causes of timeouts that need no kernel
// program: the CPU throttling of a process's cgroups, from cgroupfs files.
// Its samples are the same event.Local intervals the scheduler collector
// emits; it must not import cilium/ebpf.
package sample

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/tick"
)

// ThrottleConfig says whose CPU throttling to sample and how.
type ThrottleConfig struct {
	PID int
	// CgroupRoot is where the cgroup filesystems are mounted: the cgroup v2
	// hierarchy itself, or a tmpfs holding the v1 controllers' mounts (and
	// v2 as "unified" on hybrid hosts). A node agent reads the host's, e.g.
	// /host/sys/fs/cgroup. Default /sys/fs/cgroup.
	CgroupRoot string
	// Interval between samples of cpu.stat. Default 100ms.
	Interval time.Duration
	// Reads shares the cgroup files' reads with the other samplers of the
	// same agent (NewCgroupReads); nil: this sampler reads alone.
	Reads  *CgroupReads
	Logger *slog.Logger
}

// Throttle samples the CFS bandwidth throttling of a process's cgroup and
// its ancestors (cgroup v2 cpu.stat throttled_usec, v1 cpu.stat
// throttled_time) and emits it as event.Local intervals of kind
// LocalThrottled. Pure file reads: no kernel program. Close it once.
//
// The figure per interval is, for each level of the process's cgroup path
// that has a CPU limit, the growth of its throttled time capped at the
// number of periods it was throttled × its period (the kernel sums
// throttled time over the CPUs the group was throttled on; one throttled
// period stops the group for at most one period of wall time), then the
// largest over the levels (an ancestor's throttling stops its descendants:
// levels overlap, they do not add), capped at the interval.
type Throttle struct {
	cfg    ThrottleConfig
	log    *slog.Logger
	events chan event.Local
	done   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	stats  ThrottleStats
	reads  *CgroupReads
	own    bool // reads is this sampler's alone: closed with it
}

// ThrottleStats counts what the sampler did.
type ThrottleStats struct {
	Samples uint64
	// Levels is the number of cgroup levels with a cpu.stat being read.
	Levels int
	// Version is 1 or 2: the hierarchy the cpu controller was found in; 0
	// before it was found.
	Version int
	// Dir is the process's own cgroup directory being read.
	Dir string
	// Errors counts failed reads (the process gone, the cgroup removed).
	Errors uint64
	// Dropped counts intervals the consumer was too slow to take.
	Dropped uint64
}

// StartThrottle finds the process's cgroup and starts sampling. It fails
// when the process has no cgroup with a CPU controller under CgroupRoot.
func StartThrottle(cfg ThrottleConfig) (*Throttle, error) {
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/sys/fs/cgroup"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	t := &Throttle{cfg: cfg, log: cfg.Logger, events: make(chan event.Local, 256), done: make(chan struct{}), reads: cfg.Reads}
	if t.reads == nil {
		t.reads, t.own = NewCgroupReads(), true
	}
	levels, err := t.resolve()
	if err != nil {
		return nil, err
	}
	t.wg.Add(1)
	go t.run(levels)
	return t, nil
}

// Events delivers the intervals with throttled time, preceded by one
// zero-length interval when sampling starts (the source is watching), and
// an interval with nothing lost at least once a second. Closed by Close.
func (t *Throttle) Events() <-chan event.Local { return t.events }

// Stats returns the counters.
func (t *Throttle) Stats() ThrottleStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// Close stops sampling and closes Events.
func (t *Throttle) Close() error {
	close(t.done)
	t.wg.Wait()
	close(t.events)
	if t.own {
		t.reads.Close()
	}
	return nil
}

// level is one cgroup directory with its last sample.
type level struct {
	dir       string
	v2        bool
	period    time.Duration // CFS period; 0 when the level has no CPU limit
	throttled time.Duration
	nr        uint64
	ok        bool // a previous sample exists
}

// CgroupReads shares the reads of cgroup files between the samplers of one
// agent. A node agent samples every traced process, and processes share
// levels: a pod's containers its pod level, every pod the QoS and
// kubepods levels. Read one by one, 50 processes cost ~3000 system calls
// a second (the agent's largest cost in BenchmarkDaemon); shared, each
// level's cpu.stat is read once per interval whoever asks, kept open and
// read again at offset 0 (one pread instead of open, fstat, read, close).
// Safe for concurrent use; the files an idle level kept open are closed
// at the next read after statIdle, or by Close.
type CgroupReads struct {
	mu    sync.Mutex
	m     map[string]*statEntry // by directory
	swept time.Time
}

// NewCgroupReads returns an empty cache.
func NewCgroupReads() *CgroupReads { return &CgroupReads{m: make(map[string]*statEntry)} }

// Close closes the files the cache keeps open.
func (c *CgroupReads) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for d := range c.m {
		c.drop(d)
	}
}

type statEntry struct {
	f        *os.File // cpu.stat
	buf      []byte
	at       time.Time // when cpu.stat was last read
	thr      time.Duration
	nr       uint64
	period   time.Duration
	periodAt time.Time // when the limit was last read; zero: never
	used     time.Time
}

// statIdle is how long an entry nobody asked for stays open.
const statIdle = 10 * time.Second

// stat returns the level's cumulative throttled time and throttled
// periods, read at most once per maxAge for every sampler.
func (c *CgroupReads) stat(dir string, v2 bool, maxAge time.Duration) (time.Duration, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	e := c.entry(dir, now)
	if e.f != nil && now.Sub(e.at) < maxAge {
		return e.thr, e.nr, nil
	}
	b, err := e.read(dir)
	if err != nil {
		c.drop(dir)
		return 0, 0, err
	}
	thr, nr, err := parseCPUStat(b, v2)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", dir, err)
	}
	e.at, e.thr, e.nr = now, thr, nr
	return thr, nr, nil
}

// period returns the level's CFS period (0: no limit), read at most once
// per maxAge for every sampler.
func (c *CgroupReads) period(dir string, v2 bool, maxAge time.Duration) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	e := c.entry(dir, now)
	if !e.periodAt.IsZero() && now.Sub(e.periodAt) < maxAge {
		return e.period, nil
	}
	p, err := readPeriod(dir, v2)
	if err != nil {
		return 0, err
	}
	e.period, e.periodAt = p, now
	return p, nil
}

func (c *CgroupReads) entry(dir string, now time.Time) *statEntry {
	if now.Sub(c.swept) > statIdle {
		for d, e := range c.m {
			if now.Sub(e.used) > statIdle {
				c.drop(d)
			}
		}
		c.swept = now
	}
	e, ok := c.m[dir]
	if !ok {
		e = &statEntry{}
		c.m[dir] = e
	}
	e.used = now
	return e
}

func (c *CgroupReads) drop(dir string) {
	if e, ok := c.m[dir]; ok {
		if e.f != nil {
			e.f.Close()
		}
		delete(c.m, dir)
	}
}

// read reads the entry's cpu.stat whole.
func (e *statEntry) read(dir string) ([]byte, error) {
	if e.f == nil {
		f, err := os.Open(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			return nil, err
		}
		e.f = f
		if e.buf == nil {
			e.buf = make([]byte, 4096)
		}
	}
	for {
		n, err := e.f.ReadAt(e.buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if n < len(e.buf) {
			return e.buf[:n], nil
		}
		e.buf = make([]byte, 2*len(e.buf)) // did not fit: read it whole
	}
}

// maxLevels bounds the cgroup path walked up.
const maxLevels = 16

// resolve finds the cgroup directories to read, the process's own first.
func (t *Throttle) resolve() ([]*level, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", t.cfg.PID))
	if err != nil {
		return nil, fmt.Errorf("read the cgroup of pid %d: %w", t.cfg.PID, err)
	}
	dir, v2, err := cgroupCPUDir(t.cfg.CgroupRoot, data)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", t.cfg.PID, err)
	}
	var levels []*level
	for d := dir; len(levels) < maxLevels; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "cpu.stat")); err == nil {
			levels = append(levels, &level{dir: d, v2: v2})
		}
		if d == t.cfg.CgroupRoot || d == filepath.Dir(d) || !strings.HasPrefix(filepath.Dir(d), t.cfg.CgroupRoot) {
			break
		}
	}
	if len(levels) == 0 {
		return nil, fmt.Errorf("no cpu.stat in %s or its parents", dir)
	}
	t.mu.Lock()
	t.stats.Levels, t.stats.Dir = len(levels), dir
	t.stats.Version = 1
	if v2 {
		t.stats.Version = 2
	}
	t.mu.Unlock()
	return levels, nil
}

// ErrNoCPUController is returned when a process's cgroups have no CPU
// controller under the root: throttling cannot be read.
var ErrNoCPUController = errors.New("no cgroup with a cpu controller")

// cgroupCPUDir returns the directory of the cgroup the cpu controller
// places the process in, given its /proc/PID/cgroup: the v1 hierarchy that
// has "cpu" among its controllers, else the v2 one when its cpu.stat
// reports throttling (the cpu controller is enabled there).
func cgroupCPUDir(root string, procCgroup []byte) (string, bool, error) {
	var v2path string
	hasV2 := false
	sc := bufio.NewScanner(bytes.NewReader(procCgroup))
	for sc.Scan() {
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if id == "0" && ctrls == "" {
			v2path, hasV2 = path, true
			continue
		}
		for _, c := range strings.Split(ctrls, ",") {
			if c != "cpu" {
				continue
			}
			for _, mount := range []string{ctrls, "cpu", "cpu,cpuacct", "cpuacct,cpu"} {
				d := filepath.Join(root, mount, path)
				if _, err := os.Stat(filepath.Join(d, "cpu.stat")); err == nil {
					return d, false, nil
				}
			}
		}
	}
	if hasV2 {
		for _, base := range []string{root, filepath.Join(root, "unified")} {
			d := filepath.Join(base, v2path)
			if b, err := os.ReadFile(filepath.Join(d, "cpu.stat")); err == nil && bytes.Contains(b, []byte("throttled_usec")) {
				return d, true, nil
			}
		}
	}
	return "", false, fmt.Errorf("%w under %s", ErrNoCPUController, root)
}

// readPeriod returns the level's CFS period, 0 when it has no CPU limit.
func readPeriod(dir string, v2 bool) (time.Duration, error) {
	if v2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil // the root: never limited
		}
		if err != nil {
			return 0, err
		}
		quota, period, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
		if !ok || quota == "max" {
			return 0, nil
		}
		us, err := strconv.ParseUint(period, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/cpu.max: %w", dir, err)
		}
		return time.Duration(us) * time.Microsecond, nil
	}
	q, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	if err != nil {
		return 0, err
	}
	if strings.TrimSpace(string(q)) == "-1" {
		return 0, nil
	}
	p, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return 0, err
	}
	us, err := strconv.ParseUint(strings.TrimSpace(string(p)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s/cpu.cfs_period_us: %w", dir, err)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// parseCPUStat reads the throttled time and count from a cpu.stat.
func parseCPUStat(b []byte, v2 bool) (throttled time.Duration, nr uint64, err error) {
	found := 0
	for _, ln := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(ln, " ")
		if !ok {
			continue
		}
		switch {
		case k == "nr_throttled":
			nr, err = strconv.ParseUint(v, 10, 64)
			found++
		case v2 && k == "throttled_usec":
			var us uint64
			us, err = strconv.ParseUint(v, 10, 64)
			throttled = time.Duration(us) * time.Microsecond
			found++
		case !v2 && k == "throttled_time":
			var ns uint64
			ns, err = strconv.ParseUint(v, 10, 64)
			throttled = time.Duration(ns)
			found++
		}
		if err != nil {
			return 0, 0, fmt.Errorf("cpu.stat %s: %w", k, err)
		}
	}
	if found != 2 {
		return 0, 0, errors.New("cpu.stat has no throttling figures")
	}
	return throttled, nr, nil
}

// sample reads every level and returns the interval's throttled time and
// the number of throttled periods (of the level that lost most).
func (t *Throttle) sample(levels []*level, refreshPeriods bool) (time.Duration, uint64, error) {
	var lost time.Duration
	var count uint64
	var errs []error
	for _, l := range levels {
		if refreshPeriods || !l.ok {
			p, err := t.reads.period(l.dir, l.v2, time.Second)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			l.period = p
		}
		thr, nr, err := t.reads.stat(l.dir, l.v2, t.cfg.Interval/2)
		if err != nil {
			errs = append(errs, err)
			l.ok = false
			continue
		}
		if l.ok && thr >= l.throttled && nr >= l.nr {
			d, n := thr-l.throttled, nr-l.nr
			if l.period > 0 {
				d = min(d, time.Duration(n)*l.period)
			}
			if d > lost {
				lost, count = d, n
			}
		}
		l.throttled, l.nr, l.ok = thr, nr, true
	}
	return lost, count, errors.Join(errs...)
}

func (t *Throttle) run(levels []*level) {
	defer t.wg.Done()
	_, _, err := t.sample(levels, true)
	if err != nil {
		t.log.Warn("cgroup throttling: first sample", "pid", t.cfg.PID, "err", err)
	}
	prev := tick.Mono()
	lastSent := prev
	t.send(event.Local{Start: prev, Mono: prev, PID: uint32(t.cfg.PID), Kind: event.LocalThrottled})
	// Every sampler of the agent ticks at the same instants (multiples of
	// the interval, see package tick): their timers fire in one wakeup and
	// share each level's read (CgroupReads), instead of one wakeup per
	// process.
	tk := tick.NewTicker(t.cfg.Interval)
	defer tk.Stop()
	n := 0
	perSecond := max(1, int(time.Second/t.cfg.Interval))
	for {
		select {
		case <-t.done:
			return
		case <-tk.C:
			tk.Next()
		}
		n++
		// Limits change rarely: read them again every 30 samples. A
		// process may move between cgroups, most often just after it
		// started or was attached (a runtime placing it, a test's
		// cgroup): its cgroup is looked up again at every sample for the
		// first 5 s, then every second (one read of /proc/PID/cgroup).
		// Every 3 s, as before, left the first requests after a move
		// measured in the old cgroup: TestLocalCPUThrottled's first
		// third read runqueue_delay with no throttled time.
		refresh := n%30 == 0
		if time.Duration(n)*t.cfg.Interval <= 5*time.Second || n%perSecond == 0 {
			if l, err := t.resolve(); err == nil && (len(l) != len(levels) || l[0].dir != levels[0].dir) {
				levels = l
				t.sample(levels, true) // a new baseline
				prev = tick.Mono()
				continue
			}
		}
		lost, count, err := t.sample(levels, refresh)
		now := tick.Mono()
		t.mu.Lock()
		t.stats.Samples++
		if err != nil {
			t.stats.Errors++
		}
		t.mu.Unlock()
		// An interval with nothing lost is still sent once a second: the
		// correlator tells "not throttled" from "not watching" by it.
		if lost > 0 || now-lastSent >= uint64(time.Second) {
			lost = min(lost, time.Duration(now-prev))
			t.send(event.Local{Start: prev, Mono: now, PID: uint32(t.cfg.PID), Kind: event.LocalThrottled,
				Lost: lost, Count: uint32(min(count, 1<<32-1))})
			lastSent = now
		}
		prev = now
	}
}

func (t *Throttle) send(ev event.Local) {
	select {
	case t.events <- ev:
	default:
		t.mu.Lock()
		t.stats.Dropped++
		t.mu.Unlock()
	}
}
