package workload

import (
	"fmt"
	"os"
	"sync"
)

// CgroupIDs tells processes' cgroup ids, opening the cgroup v2 hierarchy
// under its root once, at the first question (in a private cgroup
// namespace, opening walks the tree). Safe for concurrent use.
type CgroupIDs struct {
	root string
	once sync.Once
	fs   *Cgroupfs
	err  error
}

// NewCgroupIDs is for the cgroup v2 hierarchy mounted at root ("" means
// /sys/fs/cgroup).
func NewCgroupIDs(root string) *CgroupIDs {
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	return &CgroupIDs{root: root}
}

// Of is the id bpf_get_current_cgroup_id gives for process pid's threads
// (Cgroupfs: the inode of its cgroup v2 directory, hybrid hosts and
// private cgroup namespaces included); 0 when unknown.
func (c *CgroupIDs) Of(pid int) uint64 {
	c.once.Do(func() { c.fs, c.err = OpenCgroupfs(c.root, "/proc") })
	if c.err != nil {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0
	}
	cg, err := ParseCgroupFile(string(data))
	if err != nil || cg.V2 == "" {
		return 0
	}
	_, id, err := c.fs.Dir(cg.V2)
	if err != nil {
		return 0
	}
	return id
}
