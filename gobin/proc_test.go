package gobin

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// startWaiting runs a target that blocks on stdin; the returned func ends it.
func startWaiting(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(path, "wait")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	return cmd
}

// TestOpenPID proves a running process's executable is found through
// /proc/PID/exe, with an attach path that names the same inode.
func TestOpenPID(t *testing.T) {
	path, err := filepath.EvalSymlinks(build(t, variants[0]))
	if err != nil {
		t.Fatal(err)
	}
	cmd := startWaiting(t, path)
	pid := cmd.Process.Pid
	b, err := OpenPID(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.ExePath != path {
		t.Errorf("ExePath = %q, want %q", b.ExePath, path)
	}
	if want := "/proc/" + strconv.Itoa(pid) + "/root" + path; b.AttachPath != want {
		t.Errorf("AttachPath = %q, want %q", b.AttachPath, want)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if b.File != fileID(st) {
		t.Errorf("File = %+v, want %+v", b.File, fileID(st))
	}
	if _, err := b.Func("context.WithDeadlineCause"); err != nil {
		t.Error(err)
	}
}

// TestOpenPIDDeletedExecutable proves a process whose executable was
// deleted is still analysed, attaching through /proc/PID/exe.
func TestOpenPIDDeletedExecutable(t *testing.T) {
	src, err := os.Open(build(t, variants[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(t.TempDir(), "deleted-target")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	cmd := startWaiting(t, path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	b, err := OpenPID(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !strings.HasSuffix(b.ExePath, " (deleted)") {
		t.Errorf("ExePath = %q, want a deleted path", b.ExePath)
	}
	if want := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe"; b.AttachPath != want {
		t.Errorf("AttachPath = %q, want %q", b.AttachPath, want)
	}
	if _, err := b.DeadlineSites(); err != nil {
		t.Error(err)
	}
}

// TestOpenPIDNotGo proves a non-Go process is refused with ErrNotGo.
func TestOpenPIDNotGo(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if _, err := OpenPID(cmd.Process.Pid); !errors.Is(err, ErrNotGo) {
		t.Errorf("OpenPID(sleep) = %v, want ErrNotGo", err)
	}
}
