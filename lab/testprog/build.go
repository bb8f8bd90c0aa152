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

// Standalone builds lab/testprog/<name> as a module of its own (a go.mod
// that asks for Go 1.21, not the repository's), so that a toolchain older
// than the repository's can build it: env picks it (GOTOOLCHAIN=go1.22.12,
// fetched from the module proxy on first use). Only for programs that
// import nothing but the standard library. Cached under key.
func Standalone(tb testing.TB, name, key string, env []string) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	id := name + "-" + key
	if p, ok := built[id]; ok {
		return p
	}
	mod, err := os.MkdirTemp("", "tt-standalone")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(mod) })
	files, _ := filepath.Glob(filepath.Join(srcDir(name), "*.go"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil {
			err = os.WriteFile(filepath.Join(mod, filepath.Base(f)), b, 0o644)
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module "+name+"\n\ngo 1.21\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return buildLocked(tb, id, mod, append([]string{"GOFLAGS=-mod=mod", "GOWORK=off"}, env...), nil)
}

// srcDir is the directory of lab/testprog/<rel>.
func srcDir(rel string) string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), rel)
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
	return buildLocked(tb, name, srcDir(rel), env, flags)
}

// buildLocked builds the package in src as name (mu held).
func buildLocked(tb testing.TB, name, src string, env, flags []string) string {
	if dir == "" {
		d, err := os.MkdirTemp("", "tt-testprog")
		if err != nil {
			tb.Fatal(err)
		}
		os.Chmod(d, 0o755) // tests may run a program as another user
		dir = d
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, flags...), ".")...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build %s: %v\n%s", name, err, b)
	}
	built[name] = out
	return out
}
