// Package cpulab makes local CPU trouble for lab tests: a cgroup with a
// tight CPU quota (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us where the cpu
// controller is on v1), processes moved into it, and removal afterwards.
// It needs root; tests skip through testenv.Root.
package cpulab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Cgroup is a cgroup of a test's own with a CPU quota.
type Cgroup struct {
	Dir string
	V2  bool
}

// Root is where cgroup filesystems are mounted on this host.
const Root = "/sys/fs/cgroup"

// NewCgroup creates a cgroup named name (a test's own prefix, so parallel
// runs do not collide) allowed quota of CPU time per period.
func NewCgroup(name string, quota, period time.Duration) (*Cgroup, error) {
	if strings.ContainsAny(name, "/.") || name == "" {
		return nil, fmt.Errorf("cgroup name %q: want a plain name", name)
	}
	cg, err := create(name)
	if err != nil {
		return nil, err
	}
	if err := cg.SetQuota(quota, period); err != nil {
		cg.Remove()
		return nil, err
	}
	return cg, nil
}

func create(name string) (*Cgroup, error) {
	// v1: the cpu controller's own hierarchy.
	for _, mount := range []string{"cpu", "cpu,cpuacct"} {
		base := filepath.Join(Root, mount)
		if _, err := os.Stat(filepath.Join(base, "cpu.cfs_quota_us")); err != nil {
			continue
		}
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		return &Cgroup{Dir: dir}, nil
	}
	// v2: the cpu controller must be enabled for the root's children.
	for _, base := range []string{Root, filepath.Join(Root, "unified")} {
		ctrl, err := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
		if err != nil || !hasWord(string(ctrl), "cpu") {
			continue
		}
		if err := os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
			return nil, fmt.Errorf("enable the cpu controller in %s: %w", base, err)
		}
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		return &Cgroup{Dir: dir, V2: true}, nil
	}
	return nil, errors.New("no cgroup hierarchy with the cpu controller")
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// SetQuota sets the CPU bandwidth limit.
func (c *Cgroup) SetQuota(quota, period time.Duration) error {
	q, p := quota.Microseconds(), period.Microseconds()
	if c.V2 {
		return os.WriteFile(filepath.Join(c.Dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", q, p)), 0)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "cpu.cfs_period_us"), []byte(strconv.FormatInt(p, 10)), 0); err != nil {
		return fmt.Errorf("set period: %w", err)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "cpu.cfs_quota_us"), []byte(strconv.FormatInt(q, 10)), 0); err != nil {
		return fmt.Errorf("set quota: %w", err)
	}
	return nil
}

// Add moves process pid (all its threads) into the cgroup.
func (c *Cgroup) Add(pid int) error {
	if err := os.WriteFile(filepath.Join(c.Dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move pid %d into %s: %w", pid, c.Dir, err)
	}
	return nil
}

// Throttled returns the cgroup's own throttled time so far.
func (c *Cgroup) Throttled() (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, ln := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(ln, " ")
		n, _ := strconv.ParseUint(v, 10, 64)
		switch {
		case c.V2 && k == "throttled_usec":
			return time.Duration(n) * time.Microsecond, nil
		case !c.V2 && k == "throttled_time":
			return time.Duration(n), nil
		}
	}
	return 0, errors.New("cpu.stat has no throttled time")
}

// Remove moves any remaining processes to the parent and deletes the
// cgroup.
func (c *Cgroup) Remove() error {
	parent := filepath.Join(filepath.Dir(c.Dir), "cgroup.procs")
	if b, err := os.ReadFile(filepath.Join(c.Dir, "cgroup.procs")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			_ = os.WriteFile(parent, []byte(f), 0) // a process that exited meanwhile is fine
		}
	}
	var err error
	for i := 0; i < 50; i++ { // rmdir fails while the last task is still exiting
		if err = os.Remove(c.Dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", c.Dir, err)
}
