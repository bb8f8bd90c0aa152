package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestSameProcess: an exit event's process is still there only when its
// pid is alive, not exiting (a zombie, or in do_exit: PF_EXITING), and (if
// traced) has the start time it had when it was attached: a pid reused by
// a fork is another process.
func TestSameProcess(t *testing.T) {
	root := t.TempDir()
	stat := func(pid int, state string, start int) {
		dir := filepath.Join(root, fmt.Sprint(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// Fields after the comm: state is the first, starttime the 20th.
		line := fmt.Sprintf("%d (a (b) c) %s 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0", pid, state, start)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := &Agent{cfg: Config{ProcRoot: root}, starts: map[int]string{}}
	stat(10, "S", 500)
	a.starts[10] = startTime(root, 10)
	if a.starts[10] != "500" {
		t.Fatalf("start time %q, want 500", a.starts[10])
	}
	if !a.sameProcess(10) {
		t.Error("the traced process, running: not the same")
	}
	stat(10, "Z", 500)
	if a.sameProcess(10) {
		t.Error("a zombie: the same")
	}
	stat(10, "S", 600)
	if a.sameProcess(10) {
		t.Error("the pid reused (another start time): the same")
	}
	stat(10, "S", 500)
	if !a.sameProcess(10) {
		t.Error("the traced process again: not the same")
	}
	// In do_exit: PF_EXITING (4) in the flags, the state still R.
	line := fmt.Sprintf("10 (a) R 1 1 1 0 -1 %d 0 0 0 0 0 0 0 0 20 0 1 0 500 0 0", 4194560|4)
	if err := os.WriteFile(filepath.Join(root, "10", "stat"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	if a.sameProcess(10) {
		t.Error("a process in do_exit (PF_EXITING): the same")
	}
	stat(11, "R", 700)
	if !a.sameProcess(11) {
		t.Error("an untraced live process: not the same")
	}
	if a.sameProcess(12) {
		t.Error("a pid with no /proc entry: the same")
	}
}
