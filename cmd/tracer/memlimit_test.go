package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupMemoryLimit: v1 and v2 layouts, with the cgroup's own path or
// a container's "/" (cgroup namespace), "max" and v1's unlimited value.
func TestCgroupMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		name, self string
		files      map[string]string
		want       int64
	}{
		{"v2", "0::/kubepods/pod1/c1\n", map[string]string{"kubepods/pod1/c1/memory.max": "536870912\n"}, 512 << 20},
		{"v2 namespaced", "0::/\n", map[string]string{"memory.max": "134217728\n"}, 128 << 20},
		{"v2 max", "0::/a\n", map[string]string{"a/memory.max": "max\n"}, 0},
		{"v1", "12:cpu,cpuacct:/x\n7:memory:/kubepods/pod1/c1\n0::/\n", map[string]string{"memory/kubepods/pod1/c1/memory.limit_in_bytes": "536870912\n"}, 512 << 20},
		{"v1 unlimited", "7:memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			self := filepath.Join(dir, "self")
			os.WriteFile(self, []byte(c.self), 0o644)
			for p, v := range c.files {
				os.MkdirAll(filepath.Dir(filepath.Join(dir, "root", p)), 0o755)
				os.WriteFile(filepath.Join(dir, "root", p), []byte(v), 0o644)
			}
			got, _, err := cgroupMemoryLimit(self, filepath.Join(dir, "root"))
			if err != nil || got != c.want {
				t.Errorf("limit = %d, %v; want %d", got, err, c.want)
			}
		})
	}
	if _, _, err := cgroupMemoryLimit("/nonexistent", "/sys/fs/cgroup"); err == nil {
		t.Error("no error for a missing cgroup file")
	}
}
