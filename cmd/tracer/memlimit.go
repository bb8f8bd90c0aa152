package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/timeout-tracer/tracer/workload"
)

// memLimitShare is the part of the container's memory limit that the Go
// heap is kept under when GOMEMLIMIT is not set: the rest is the runtime's,
// the BPF ring buffers' pages and the stacks'.
const memLimitShare = 0.75

// setMemoryLimit gives the Go runtime a soft memory limit under the
// memory limit of the agent's own cgroup (v2 memory.max, or v1
// memory.limit_in_bytes), so that the collector works harder before the
// kernel's OOM killer does. GOMEMLIMIT, when set, wins (the runtime already
// read it). It says what it did.
func setMemoryLimit(log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		log.Debug("memory limit from GOMEMLIMIT", "bytes", debug.SetMemoryLimit(-1))
		return
	}
	limit, where, err := cgroupMemoryLimit("/proc/self/cgroup", "/sys/fs/cgroup")
	if err != nil || limit == 0 {
		log.Debug("no cgroup memory limit: the Go runtime's memory is not capped", "err", err)
		return
	}
	soft := int64(float64(limit) * memLimitShare)
	debug.SetMemoryLimit(soft)
	log.Info("Go memory limit set under the container's", "limit_bytes", limit, "go_limit_bytes", soft, "cgroup", where)
}

// cgroupMemoryLimit reads the memory limit of this process's cgroup: 0
// when there is none ("max", or v1's huge "unlimited" value).
func cgroupMemoryLimit(selfCgroup, root string) (int64, string, error) {
	b, err := os.ReadFile(selfCgroup)
	if err != nil {
		return 0, "", err
	}
	cg, err := workload.ParseCgroupFile(string(b))
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", selfCgroup, err)
	}
	try := func(path string) (int64, string, bool) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, "", false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 { // "max", or v1's unlimited
			return 0, path, true
		}
		return n, path, true
	}
	if v1, ok := cg.V1["memory"]; ok {
		// In a container's cgroup namespace the path is "/" and the
		// controller is mounted at its cgroup: try both.
		for _, p := range []string{filepath.Join(root, "memory", v1, "memory.limit_in_bytes"), filepath.Join(root, "memory", "memory.limit_in_bytes")} {
			if n, where, ok := try(p); ok {
				return n, where, nil
			}
		}
	}
	if cg.V2 != "" {
		for _, p := range []string{filepath.Join(root, cg.V2, "memory.max"), filepath.Join(root, "memory.max")} {
			if n, where, ok := try(p); ok {
				return n, where, nil
			}
		}
	}
	return 0, "", fmt.Errorf("no memory controller for this process in %s", selfCgroup)
}
