package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ReadIdentity reads what /proc says of process pid: its executable (path,
// name, inode). Kernel threads have no executable: os.ErrNotExist.
func ReadIdentity(procRoot string, pid int) (Identity, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	id := Identity{PID: pid}
	if b, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
		id.Comm = strings.TrimSuffix(string(b), "\n")
	}
	exe := filepath.Join(dir, "exe")
	target, err := os.Readlink(exe)
	if err != nil {
		return id, fmt.Errorf("process %d: %w", pid, err)
	}
	id.ExePath = strings.TrimSuffix(target, " (deleted)")
	id.ExeName = filepath.Base(id.ExePath)
	st, err := os.Stat(exe)
	if err != nil {
		return id, fmt.Errorf("process %d: %w", pid, err)
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		id.Exe = FileID{Dev: uint64(s.Dev), Ino: uint64(s.Ino)}
	}
	return id, nil
}
