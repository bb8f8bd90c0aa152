package proc

import (
	"os/exec"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/lab/testenv"
)

// A process started and ended under the collector is seen exec'ing and
// exiting, with its pid, parent and name.
func TestExecAndExitOfAChild(t *testing.T) {
	testenv.Root(t)
	if err := collector.Preflight(); err != nil {
		t.Skipf("kernel tracing unavailable: %v", err)
	}
	c, err := Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	cmd := exec.Command("/bin/sleep", "0.05")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	seen := map[Kind]Event{}
	timeout := time.After(5 * time.Second)
	for len(seen) < 2 {
		select {
		case ev := <-c.Events():
			if ev.PID == pid {
				seen[ev.Kind] = ev
			}
		case <-timeout:
			t.Fatalf("after 5 s, saw %v of pid %d", seen, pid)
		}
	}
	if ex := seen[Exec]; ex.Comm != "sleep" || ex.PPID == 0 || ex.Time.IsZero() {
		t.Errorf("exec %+v: want comm sleep, a parent and a time", ex)
	}
	if seen[Exit].Mono < seen[Exec].Mono {
		t.Errorf("exit at %d before exec at %d", seen[Exit].Mono, seen[Exec].Mono)
	}
}
