// Package testprog builds the small programs under internal/testprog, and
// the tracer itself, for tests that run them as separate processes (so that
// a socket's owner is not the tracer). Each is built once per test binary.
package testprog

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
	dir   string
)

// Path returns the built program internal/testprog/<name>. With
// TT_TEST_BIN_DIR set (make test-unprivileged) it uses the prebuilt one.
func Path(tb testing.TB, name string) string {
	tb.Helper()
	return build(tb, name, name)
}

// Tracer returns the built cmd/tracer, the binary users run.
func Tracer(tb testing.TB) string {
	tb.Helper()
	return build(tb, "tracer", filepath.Join("..", "..", "cmd", "tracer"))
}

func build(tb testing.TB, name, rel string) string {
	if d := os.Getenv("TT_TEST_BIN_DIR"); d != "" {
		return filepath.Join(d, name)
	}
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "tt-testprog")
		if err != nil {
			tb.Fatal(err)
		}
		os.Chmod(d, 0o755) // tests may run a program as another user
		dir = d
	}
	_, self, _, _ := runtime.Caller(0)
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = filepath.Join(filepath.Dir(self), rel)
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build %s: %v\n%s", name, err, b)
	}
	built[name] = out
	return out
}
