package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The switch really gates: a child test run without TT_LAB skips with the
// reason, and with TT_LAB=1 it gets past Lab.
func TestLabSwitch(t *testing.T) {
	if os.Getenv("TT_TESTENV_CHILD") == "1" {
		Lab(t)
		t.Log("past the switch")
		return
	}
	run := func(lab string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLabSwitch$", "-test.v")
		cmd.Env = append(os.Environ(), "TT_TESTENV_CHILD=1", Var+"="+lab)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child with %s=%q: %v\n%s", Var, lab, err, out)
		}
		return string(out)
	}
	if out := run(""); !strings.Contains(out, "--- SKIP") || !strings.Contains(out, Var+"=1") {
		t.Errorf("without the switch the test did not skip with the reason:\n%s", out)
	}
	if out := run("1"); !strings.Contains(out, "past the switch") {
		t.Errorf("with the switch the test did not run:\n%s", out)
	}
}
