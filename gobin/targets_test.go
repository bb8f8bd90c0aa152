package gobin

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The test targets are real Go programs built at test time: one source
// tree, several build variants. Each variant is built at most once per test
// binary and shared by the tests.

const targetMain = `package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"example.com/dep"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "wait" {
		io.Copy(io.Discard, os.Stdin) // stay alive until the test closes stdin
		return
	}
	// TimeoutHandler: the probes read its frame (net/http.timeoutHandler).
	srv := httptest.NewServer(http.TimeoutHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(200 * time.Millisecond)
	}), 5*time.Second, ""))
	defer srv.Close()
	outer, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	inner, cancel2 := dep.Nested(outer, 50*time.Millisecond)
	defer cancel2()
	req, _ := http.NewRequestWithContext(inner, http.MethodGet, srv.URL, nil)
	_, err := http.DefaultClient.Do(req)
	fmt.Println(err)
	// Parents the trace-context walk follows: withoutCancelCtx, afterFuncCtx.
	stop := context.AfterFunc(context.WithoutCancel(outer), func() {})
	stop()
}
`

const targetDep = `// Package dep derives nested deadlines.
package dep

import (
	"context"
	"time"
)

// Nested returns a child of ctx with a shorter deadline.
func Nested(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithDeadline(ctx, time.Now().Add(d))
}
`

const targetGoMod = `module example.com/target

go 1.17

require example.com/dep v0.0.0

replace example.com/dep => ./dep
`

// mainLine is the line of "func main() {" in targetMain.
func mainLine(t *testing.T) int {
	for i, l := range strings.Split(targetMain, "\n") {
		if l == "func main() {" {
			return i + 1
		}
	}
	t.Fatal("targetMain has no func main")
	return 0
}

// variant is one way of building the target.
type variant struct {
	name   string
	goarch string
	args   []string // extra go build arguments
	cgo    bool     // needs a C toolchain (external linking)
	mode   string   // variants with equal mode must have identical code layout
	dwarf  bool     // built with DWARF
	symtab bool     // built with .symtab
}

var variants = []variant{
	{name: "plain", goarch: "amd64", mode: "amd64-exe", dwarf: true, symtab: true},
	{name: "stripped", goarch: "amd64", args: []string{"-ldflags=-s -w"}, mode: "amd64-exe"},
	{name: "nodwarf", goarch: "amd64", args: []string{"-ldflags=-w"}, mode: "amd64-exe", symtab: true},
	{name: "pie", goarch: "amd64", args: []string{"-buildmode=pie"}, mode: "amd64-pie", dwarf: true, symtab: true},
	{name: "pie-stripped", goarch: "amd64", args: []string{"-buildmode=pie", "-ldflags=-s -w"}, mode: "amd64-pie"},
	{name: "trimpath", goarch: "amd64", args: []string{"-trimpath"}, mode: "amd64-trimpath", dwarf: true, symtab: true},
	{name: "external", goarch: "amd64", args: []string{"-ldflags=-linkmode=external"}, cgo: true, mode: "amd64-ext", dwarf: true, symtab: true},
	{name: "external-stripped", goarch: "amd64", args: []string{"-ldflags=-linkmode=external -s -w"}, cgo: true, mode: "amd64-ext"},
	{name: "external-pie", goarch: "amd64", args: []string{"-buildmode=pie", "-ldflags=-linkmode=external"}, cgo: true, mode: "amd64-extpie", dwarf: true, symtab: true},
	{name: "external-pie-stripped", goarch: "amd64", args: []string{"-buildmode=pie", "-ldflags=-linkmode=external -s -w"}, cgo: true, mode: "amd64-extpie"},
	{name: "arm64", goarch: "arm64", mode: "arm64-exe", dwarf: true, symtab: true},
	{name: "arm64-stripped", goarch: "arm64", args: []string{"-ldflags=-s -w"}, mode: "arm64-exe"},
	{name: "arm64-pie", goarch: "arm64", args: []string{"-buildmode=pie"}, mode: "arm64-pie", dwarf: true, symtab: true},
	{name: "arm64-pie-stripped", goarch: "arm64", args: []string{"-buildmode=pie", "-ldflags=-s -w"}, mode: "arm64-pie"},
}

// targets builds variants on demand into one directory per test binary.
var targets struct {
	dirOnce sync.Once
	dir     string
	srcErr  error
	mu      sync.Mutex
	built   map[string]*buildResult
}

type buildResult struct {
	once sync.Once
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if targets.dir != "" {
		os.RemoveAll(targets.dir)
	}
	os.Exit(code)
}

// goEnv is the environment for go commands run by the tests: no workspace,
// no VCS stamping, toolchain as configured.
func goEnv(extra ...string) []string {
	return append(os.Environ(), append([]string{"GOWORK=off", "GOFLAGS=-buildvcs=false", "GOOS=linux"}, extra...)...)
}

// srcDir writes the target's source tree once.
func srcDir(t testing.TB) string {
	targets.dirOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gobin-targets")
		if err != nil {
			targets.srcErr = err
			return
		}
		targets.dir = dir
		files := map[string]string{
			"src/go.mod":     targetGoMod,
			"src/main.go":    targetMain,
			"src/dep/go.mod": "module example.com/dep\n\ngo 1.17\n",
			"src/dep/dep.go": targetDep,
		}
		for name, content := range files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				targets.srcErr = err
				return
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				targets.srcErr = err
				return
			}
		}
	})
	if targets.srcErr != nil {
		t.Fatalf("write target sources: %v", targets.srcErr)
	}
	return filepath.Join(targets.dir, "src")
}

// build returns the path of the target built as v, building it on first use.
func build(t testing.TB, v variant) string {
	t.Helper()
	if v.cgo {
		if _, err := exec.LookPath("gcc"); err != nil {
			t.Skipf("variant %s needs gcc for external linking: %v", v.name, err)
		}
	}
	src := srcDir(t)
	targets.mu.Lock()
	if targets.built == nil {
		targets.built = map[string]*buildResult{}
	}
	r, ok := targets.built[v.name]
	if !ok {
		r = &buildResult{}
		targets.built[v.name] = r
	}
	targets.mu.Unlock()
	r.once.Do(func() {
		r.path = filepath.Join(targets.dir, v.name)
		args := append([]string{"build", "-o", r.path}, v.args...)
		cmd := exec.Command("go", append(args, ".")...)
		cmd.Dir = src
		cgo := "CGO_ENABLED=0"
		if v.cgo {
			cgo = "CGO_ENABLED=1"
		}
		cmd.Env = goEnv("GOARCH="+v.goarch, cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			r.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if r.err != nil {
		t.Fatalf("build target %s: %v", v.name, r.err)
	}
	return r.path
}

// openVariant builds and opens v, closing it at the end of the test.
func openVariant(t *testing.T, v variant) *Binary {
	t.Helper()
	b, err := Open(build(t, v))
	if err != nil {
		t.Fatalf("Open(%s): %v", v.name, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// forEachVariant runs f as a parallel-safe subtest per variant.
func forEachVariant(t *testing.T, f func(t *testing.T, v variant, b *Binary)) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) { f(t, v, openVariant(t, v)) })
	}
}

// goVersion is the toolchain version the targets are built with.
func goVersion(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatalf("go env GOVERSION: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// nmSymbols returns the text symbols of an unstripped binary as listed by
// go tool nm: an oracle independent of this package.
func nmSymbols(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	out, err := exec.Command("go", "tool", "nm", path).Output()
	if err != nil {
		t.Fatalf("go tool nm %s: %v", path, err)
	}
	syms := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || (f[1] != "T" && f[1] != "t") {
			continue
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		syms[strings.Join(f[2:], " ")] = addr
	}
	return syms
}

// objdumpLine is one instruction as printed by go tool objdump.
type objdumpLine struct {
	pos  string // file:line
	addr uint64
	asm  string
}

// objdump disassembles the function named exactly name with go tool
// objdump (unstripped binaries only): an oracle for this package's decoder.
func objdump(t *testing.T, path, name string) []objdumpLine {
	t.Helper()
	out, err := exec.Command("go", "tool", "objdump", "-s", "^"+regexp.QuoteMeta(name)+"$", path).Output()
	if err != nil {
		t.Fatalf("go tool objdump %s: %v", name, err)
	}
	var lines []objdumpLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var f []string
		for _, s := range strings.Split(strings.TrimSpace(sc.Text()), "\t") {
			if s = strings.TrimSpace(s); s != "" {
				f = append(f, s)
			}
		}
		// file:line, address, encoding, instruction
		if len(f) < 4 || !strings.HasPrefix(f[1], "0x") {
			continue
		}
		addr, err := strconv.ParseUint(f[1][2:], 16, 64)
		if err != nil {
			continue
		}
		asm := f[3]
		lines = append(lines, objdumpLine{pos: f[0], addr: addr, asm: asm})
	}
	if len(lines) == 0 {
		t.Fatalf("go tool objdump found no function %s in %s", name, path)
	}
	return lines
}
