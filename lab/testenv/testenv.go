// Package testenv is the one switch and the one set of skip helpers for
// tests that need more than a Go toolchain: root, the kernel's tracing,
// network namespaces, cgroups, processes of other users. Those tests run
// only when TT_LAB=1 (make test and CI set it) and otherwise skip with the
// reason, so that `go test ./...` stays hermetic, parallel and quick as any
// user, root included.
//
// It must not import the product's packages: the product's own tests import
// it (collector tests add their kernel preflight on top of Root).
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Var is the environment variable that switches the lab tests on.
const Var = "TT_LAB"

// Enabled reports whether lab tests are switched on (TT_LAB=1).
func Enabled() bool { return os.Getenv(Var) == "1" }

// Privileged reports whether lab tests are on and the test runs as root:
// the condition under which a test may take root-only branches.
func Privileged() bool { return Enabled() && os.Geteuid() == 0 }

// Lab skips the test unless lab tests are switched on.
func Lab(tb testing.TB) {
	tb.Helper()
	if !Enabled() {
		tb.Skipf("lab test: runs with %s=1 (make test and CI set it)", Var)
	}
}

// Root skips the test unless lab tests are on and it runs as uid 0.
// Namespaces, veth pairs, iptables rules, cgroups and BPF all need root.
func Root(tb testing.TB) {
	tb.Helper()
	Lab(tb)
	if uid := os.Geteuid(); uid != 0 {
		tb.Skipf("lab test: needs root (running as uid %d)", uid)
	}
}

// Command skips the test unless name is on PATH, and returns its path.
func Command(tb testing.TB, name, pkg string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		tb.Skipf("needs %s (Debian package %s): %v", name, pkg, err)
	}
	return p
}
