package workload

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Cgroupfs maps the cgroup v2 paths that /proc shows to directories of a
// mount of the host's cgroup filesystem (in the DaemonSet, the host's
// /sys/fs/cgroup mounted read-only at /host/sys/fs/cgroup), where files
// such as cpu.stat can be read.
//
// In a container with its own cgroup namespace (the default on cgroup v2
// nodes) /proc/PID/cgroup is relative to that namespace's root: a pod's
// process appears as "/../../kubepods-besteffort.slice/...". The host mount
// shows the whole tree, so OpenCgroupfs finds once where the reader's
// namespace root sits in it, and Dir resolves the ".." paths from there.
type Cgroupfs struct {
	root   string // the directory of the v2 hierarchy's root
	nsRoot string // the reader's cgroup namespace root in that hierarchy
}

// OpenCgroupfs finds the cgroup v2 hierarchy under root (root itself on a
// unified host, root/unified on a hybrid one) and, when the caller runs in a
// private cgroup namespace, where that namespace's root sits in it.
// procRoot is where /proc is mounted (in the DaemonSet, with hostPID,
// "/proc"). The search for the namespace root walks the tree once.
func OpenCgroupfs(root, procRoot string) (*Cgroupfs, error) {
	c := &Cgroupfs{nsRoot: "/"}
	for _, dir := range []string{root, filepath.Join(root, "unified")} {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.controllers")); err == nil {
			c.root = dir
			break
		}
	}
	if c.root == "" {
		return nil, fmt.Errorf("open cgroup root %s: no cgroup v2 hierarchy there (no cgroup.controllers in it or in its unified/): mount the host's /sys/fs/cgroup at %s, read-only", root, root)
	}
	self, err := readV2(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return nil, fmt.Errorf("open cgroup root %s: %w", root, err)
	}
	init, err := readV2(filepath.Join(procRoot, "1", "cgroup"))
	if err != nil {
		return nil, fmt.Errorf("open cgroup root %s: %w", root, err)
	}
	if !strings.HasPrefix(init, "/..") {
		// PID 1 is inside our namespace: it is the host's (paths are
		// absolute), or the namespace is not private to us.
		return c, nil
	}
	dir, err := findProcess(c.root, os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("open cgroup root %s: this process runs in a private cgroup namespace and %w", root, err)
	}
	// dir is nsRoot + self: cut self off the end.
	ns := dir
	if self != "/" {
		var ok bool
		if ns, ok = strings.CutSuffix(dir, path.Clean(self)); !ok {
			return nil, fmt.Errorf("open cgroup root %s: found this process in %s, which does not end in its own cgroup path %s", root, dir, self)
		}
	}
	c.nsRoot = path.Clean("/" + ns)
	return c, nil
}

// Root is the directory of the cgroup v2 hierarchy's root.
func (c *Cgroupfs) Root() string { return c.root }

// NamespaceRoot is where the reader's cgroup namespace root sits in the
// hierarchy: "/" when the reader sees absolute paths.
func (c *Cgroupfs) NamespaceRoot() string { return c.nsRoot }

// Dir returns the directory of cgroup v2 path p (as /proc/PID/cgroup shows
// it to this reader) and its cgroup ID: the directory's inode number, the
// same value bpf_get_current_cgroup_id() gives in the kernel.
func (c *Cgroupfs) Dir(p string) (dir string, id uint64, err error) {
	if !strings.HasPrefix(p, "/") {
		return "", 0, fmt.Errorf("cgroup path %q: not absolute (is the process's cgroup v2 line missing?)", p)
	}
	abs := path.Join(c.nsRoot, p) // Join cleans: "/a/b" + "/../x" = "/a/x"
	dir = filepath.Join(c.root, filepath.FromSlash(abs))
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", 0, fmt.Errorf("cgroup %s: %w (the cgroup was removed, or %s is not the host's cgroup hierarchy)", dir, err, c.root)
		}
		return "", 0, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return "", 0, fmt.Errorf("cgroup %s: stat gave no inode", dir)
	}
	return dir, sys.Ino, nil
}

// readV2 reads the v2 path from a /proc/PID/cgroup file.
func readV2(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	cg, err := ParseCgroupFile(string(b))
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	if cg.V2 == "" {
		return "", fmt.Errorf("%s has no cgroup v2 line (0::/...)", file)
	}
	return cg.V2, nil
}

// findProcess walks the hierarchy under root for the cgroup whose
// cgroup.procs lists pid, and returns its path relative to root.
func findProcess(root string, pid int) (string, error) {
	want := strconv.Itoa(pid)
	var found string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if listsPID(filepath.Join(p, "cgroup.procs"), want) {
			rel, _ := filepath.Rel(root, p)
			found = "/" + filepath.ToSlash(rel)
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("walking %s for its own cgroup failed: %w", root, err)
	}
	if found == "" {
		return "", fmt.Errorf("its pid %d is in no cgroup.procs under %s: is that the host's cgroup hierarchy, and does the pod run with hostPID?", pid, root)
	}
	return path.Clean(found), nil
}

func listsPID(file, pid string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if s.Text() == pid {
			return true
		}
	}
	return false
}
