package workload

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The channel closes when the process exits, not before; a process that
// does not exist is an error that says so.
func TestWatchExit(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep command: %v", err)
	}
	done, err := WatchExit(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Fatal("closed while the process runs")
	case <-time.After(50 * time.Millisecond):
	}
	cmd.Process.Kill()
	cmd.Wait()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not closed after the process exited")
	}
	if _, err := WatchExit(cmd.Process.Pid); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a reaped pid: %v, want does not exist", err)
	}
	if _, err := WatchExit(-3); err == nil {
		t.Error("a negative pid: no error")
	}
}
