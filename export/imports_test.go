package export

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// export must not depend on cilium/ebpf or the collector, even
// indirectly: it runs and is tested without root, on plain values.
func TestNoEBPFImport(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not in PATH: cannot list the import graph")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "./export")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("implausibly few dependencies: %v", deps)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/cilium/ebpf") || (d == "github.com/timeout-tracer/tracer/collector" || strings.HasPrefix(d, "github.com/timeout-tracer/tracer/collector/")) {
			t.Errorf("depends on %s", d)
		}
	}
}
