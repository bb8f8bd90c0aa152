// Package testprog builds the small programs under lab/testprog, and
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

// Path returns the built program lab/testprog/<name>. With
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

// Variant builds lab/testprog/<name> with extra go build flags and
// environment (e.g. "-ldflags=-s -w", GOARCH=arm64), cached under key.
func Variant(tb testing.TB, name, key string, env []string, flags ...string) string {
	tb.Helper()
	return buildWith(tb, name+"-"+key, name, env, flags)
}

func build(tb testing.TB, name, rel string) string {
	if d := os.Getenv("TT_TEST_BIN_DIR"); d != "" {
		return filepath.Join(d, name)
	}
	return buildWith(tb, name, rel, nil, nil)
}

func buildWith(tb testing.TB, name, rel string, env, flags []string) string {
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
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, flags...), ".")...)
	cmd.Dir = filepath.Join(filepath.Dir(self), rel)
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build %s: %v\n%s", name, err, b)
	}
	built[name] = out
	return out
}
