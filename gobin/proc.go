package gobin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// OpenPID opens the executable of process pid through /proc/PID/exe. That
// link is a kernel "magic link": opening it reaches the file even when the
// process lives in another mount namespace or the file was deleted or
// replaced. Attach only after the target has exec'd: right after a launcher
// (a shell, "ip netns exec") starts it, /proc/PID/exe is still the launcher.
func OpenPID(pid int) (*Binary, error) {
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	b, err := Open(exe)
	if err != nil {
		return nil, err
	}
	b.AttachPath = exe
	target, err := os.Readlink(exe)
	if err != nil {
		return b, nil // the magic link still works; only the name is unknown
	}
	b.ExePath = target
	if strings.HasSuffix(target, " (deleted)") || !filepath.IsAbs(target) {
		return b, nil
	}
	// A path through the process's root names the file for people and
	// stays valid for other processes of the same mount namespace; use it
	// only if it still leads to the very inode the process runs.
	viaRoot := fmt.Sprintf("/proc/%d/root%s", pid, target)
	if st, err := os.Stat(viaRoot); err == nil && fileID(st) == b.File {
		b.AttachPath = viaRoot
	}
	return b, nil
}

// fileID extracts device and inode numbers from file information.
func fileID(fi os.FileInfo) FileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileID{}
	}
	return FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
}
