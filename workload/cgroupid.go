package workload

import (
	"fmt"
	"os"
	"sync"
)

// CgroupID is the id bpf_get_current_cgroup_id gives for process pid's
// threads (Cgroupfs: the inode of its cgroup v2 directory under root,
// hybrid hosts and private cgroup namespaces included); 0 when unknown.
// root is where the cgroup v2 hierarchy is mounted ("" means
// /sys/fs/cgroup).
func CgroupID(pid int, root string) uint64 {
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	fs, err := cgroupfsOf(root)
	if err != nil {
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
	_, id, err := fs.Dir(cg.V2)
	if err != nil {
		return 0
	}
	return id
}

// cgroupfsOf opens the cgroup v2 hierarchy under root once per root (in a
// private cgroup namespace, opening walks the tree).
func cgroupfsOf(root string) (*Cgroupfs, error) {
	cgroupfsMu.Lock()
	defer cgroupfsMu.Unlock()
	if fs, ok := cgroupfsByRoot[root]; ok {
		return fs, nil
	}
	fs, err := OpenCgroupfs(root, "/proc")
	if err != nil {
		return nil, err
	}
	cgroupfsByRoot[root] = fs
	return fs, nil
}

var (
	cgroupfsMu     sync.Mutex
	cgroupfsByRoot = map[string]*Cgroupfs{}
)
