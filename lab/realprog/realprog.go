// Package realprog builds the real-program suite's programs: widely used
// Go programs this project did not write, at pinned versions, from the Go
// module proxy. Each is built inside the module cache with its own go.mod
// and go.sum, as its authors build it (no dependency of ours changes it;
// some modules refuse `go install` with a 403 on their version list, an
// exact `go mod download MODULE@VERSION` does not).
//
// Built once per machine into $(go env GOPATH)/bin/tt-realprog/, keyed by
// module version and Go version; TT_REALPROG_BIN names another directory.
package realprog

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Program is one program of the suite.
type Program struct {
	Name    string // the executable's name
	Module  string // its module
	Version string // pinned
	Pkg     string // the main package within the module ("." for its root)
	Stack   string // its client stack, for the table
	// Wrapper, when set, is a module of ours beside this file that lists
	// the program as a tool: built there, not in the module cache, for a
	// module whose go.mod replaces its siblings with relative paths
	// (etcd's). Its go.mod pins the version; Version must match it.
	Wrapper string
	// Toolchain, when set, is the Go release it is built with
	// (GOTOOLCHAIN, fetched from the module proxy like a module): the
	// programs of older Go runtimes (runtime.hmap maps, another
	// context package). Empty: this machine's Go.
	Toolchain string
	// Assets, when set, are files its build embeds that its module's zip
	// lacks (a web UI its authors build with npm first): the module is
	// copied out of the module cache and each is created empty there
	// (paths relative to the module's root) before the build.
	Assets []string
}

// Programs is the suite, each with a different client stack or shape
// (a load generator, one-shot CLIs, gRPC and HTTP).
var Programs = []Program{
	{"vegeta", "github.com/tsenart/vegeta/v12", "v12.13.0", ".", "HTTP/1 load generator (net/http, Client.Timeout)", "", "", nil},
	{"hey", "github.com/rakyll/hey", "v0.1.5", ".", "HTTP/1 load generator (net/http, Client.Timeout, new goroutine per worker)", "", "", nil},
	{"grpcurl", "github.com/fullstorydev/grpcurl", "v1.9.3", "cmd/grpcurl", "one-shot gRPC CLI (grpc-go, reflection, -max-time)", "", "", nil},
	{"grpc_health_probe", "github.com/grpc-ecosystem/grpc-health-probe", "v0.4.62", ".", "one-shot gRPC health probe (grpc-go, -connect-timeout, -rpc-timeout)", "", "", nil},
	{"blackbox_exporter", "github.com/prometheus/blackbox_exporter", "v0.27.0", ".", "Prometheus prober (net/http under the scrape's timeout, a server making the calls)", "", "", nil},
	{"otel-cli", "github.com/equinix-labs/otel-cli", "v0.4.5", ".", "one-shot OTLP exporter CLI (otel-go OTLP/gRPC, --timeout)", "", "", nil},
	{"caddy", "github.com/caddyserver/caddy/v2", "v2.11.9", "cmd/caddy", "reverse proxy: a server dialing its upstream under reverse_proxy's dial_timeout (net.Dialer.Timeout, a context deadline)", "", "", nil},
	{"etcdctl", "go.etcd.io/etcd/etcdctl/v3", "v3.6.4", ".", "one-shot database CLI (etcd clientv3 over grpc-go, --dial-timeout, --command-timeout)", "etcdbin", "", nil},
	{"goose", "github.com/pressly/goose/v3", "v3.30.1", "cmd/goose", "one-shot SQL migration CLI (database/sql over pgx v5 to PostgreSQL, -timeout)", "", "", nil},
	// hey's last release for old Go (go.mod: go 1.13), built with Go 1.22:
	// a runtime whose maps are runtime.hmap and whose DWARF lacks
	// context.withoutCancelCtx (the old-toolchain paths of the probes).
	{"hey-go1.22", "github.com/rakyll/hey", "v0.1.4", ".", "HTTP/1 load generator built with Go 1.22 (net/http, Client.Timeout)", "", "go1.22.12", nil},
	// A server: its API under http.TimeoutHandler (--web.timeout), behind
	// otelhttp and Prometheus' instrumentation, which wrap the
	// ResponseWriter; its UI (built with npm by its Makefile) left empty.
	{"alertmanager", "github.com/prometheus/alertmanager", "v0.35.0", "cmd/alertmanager",
		"Prometheus' Alertmanager: an HTTP API server under http.TimeoutHandler (--web.timeout), behind otelhttp and promhttp middleware", "", "",
		[]string{"ui/app/dist/index.html"}},
}

// Peers are real servers some programs of the suite talk to (not traced).
var Peers = []Program{
	{"etcd", "go.etcd.io/etcd/server/v3", "v3.6.4", ".", "etcd, the key-value store etcdctl talks to", "etcdbin", "", nil},
}

// All is the suite's programs and their peers: what a machine builds.
func All() []Program { return append(slices.Clip(Programs), Peers...) }

// Lookup returns the program (or peer) named name.
func Lookup(name string) (Program, bool) {
	for _, p := range All() {
		if p.Name == name {
			return p, true
		}
	}
	return Program{}, false
}

var (
	mu    sync.Mutex
	built = map[string]string{}
)

// Dir is where the programs are built.
func Dir() (string, error) {
	if d := os.Getenv("TT_REALPROG_BIN"); d != "" {
		return d, nil
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOPATH: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "bin", "tt-realprog"), nil
}

// Build returns the path of the built program, building it on first use.
func Build(tb testing.TB, name string) string {
	tb.Helper()
	p, ok := Lookup(name)
	if !ok {
		tb.Fatalf("realprog: no program %q", name)
	}
	path, err := p.Build()
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// Build builds the program (once per machine) and returns its path.
func (p Program) Build() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if path, ok := built[p.Name]; ok {
		return path, nil
	}
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	goVersion := runtime.Version()
	if p.Toolchain != "" {
		goVersion = p.Toolchain
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%s-%s", p.Name, p.Version, goVersion), p.Name)
	if _, err := os.Stat(path); err == nil {
		built[p.Name] = path
		return path, nil
	}
	var src, pkg string
	if p.Wrapper != "" {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			return "", fmt.Errorf("realprog: build %s: where its wrapper module is was not found", p.Name)
		}
		src, pkg = filepath.Join(filepath.Dir(file), p.Wrapper), p.Module
		if p.Pkg != "." {
			pkg += "/" + p.Pkg
		}
		// The wrapper's go.sum lists what it needs: fetch it (a fresh
		// machine's module cache is empty; -mod=readonly never downloads
		// a module the build list has not fetched).
		dl := exec.Command("go", "mod", "download")
		dl.Dir = src
		dl.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local")
		if out, err := dl.CombinedOutput(); err != nil {
			return "", fmt.Errorf("realprog: go mod download in %s: %v\n%s", src, err, out)
		}
	} else {
		var err error
		if src, err = download(p.Module + "@" + p.Version); err != nil {
			return "", err
		}
		pkg = "./" + p.Pkg
		if len(p.Assets) > 0 {
			if src, err = withAssets(src, filepath.Join(dir, fmt.Sprintf("src-%s-%s", p.Name, p.Version)), p.Assets); err != nil {
				return "", err
			}
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, pkg)
	cmd.Dir = src
	// Its own go.mod, read-only (the module cache); this machine's Go,
	// or its own.
	toolchain := "GOTOOLCHAIN=local"
	if p.Toolchain != "" {
		toolchain = "GOTOOLCHAIN=" + p.Toolchain
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly -buildvcs=false", "GOWORK=off", toolchain)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("realprog: build %s %s@%s in %s: %v\n%s", p.Name, p.Module, p.Version, src, err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	built[p.Name] = path
	return path, nil
}

// download fetches module@version into the module cache and returns its
// directory there.
func download(mv string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", mv)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); jerr != nil || m.Error != "" || m.Dir == "" {
		if m.Error != "" {
			return "", fmt.Errorf("realprog: go mod download %s: %s", mv, m.Error)
		}
		return "", fmt.Errorf("realprog: go mod download %s: %v %s", mv, err, out)
	}
	return m.Dir, nil
}

// withAssets copies the module at src to dst (afresh) and creates each of
// assets there, empty: files its build embeds that the module's zip lacks.
func withAssets(src, dst string, assets []string) (string, error) {
	if err := os.RemoveAll(dst); err != nil {
		return "", err
	}
	if out, err := exec.Command("cp", "-r", src, dst).CombinedOutput(); err != nil {
		return "", fmt.Errorf("realprog: copy %s: %v: %s", src, err, out)
	}
	if out, err := exec.Command("chmod", "-R", "u+w", dst).CombinedOutput(); err != nil {
		return "", fmt.Errorf("realprog: chmod %s: %v: %s", dst, err, out)
	}
	for _, a := range assets {
		f := filepath.Join(dst, a)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			return "", err
		}
	}
	return dst, nil
}
