package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/deploy"
	"github.com/timeout-tracer/tracer/lab/testenv"
)

// requireContainerd skips unless this is root with containerd, ctr and
// runc installed (.ci/deps installs Debian's).
func requireContainerd(t *testing.T) {
	t.Helper()
	testenv.Root(t) // runs a private containerd
	for _, bin := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s (apt-get install containerd runc): %v", bin, err)
		}
	}
}

// privateContainerd starts a containerd of the test's own: its state in a
// temporary directory, its socket there, in a mount namespace of its own
// (its snapshot mounts vanish with it), without the CRI plugin. It returns
// a function that runs ctr against it in namespace k8s.io, where the
// kubelet's images live.
func privateContainerd(t *testing.T) func(args ...string) (string, error) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "tt-ctr-") // short: a socket path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "c.sock")
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	// unshare execs containerd: the PID is containerd's.
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctr := func(args ...string) (string, error) {
		out, err := exec.Command("ctr", append([]string{"-a", sock, "-n", "k8s.io"}, args...)...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		// Tasks first (a shim would keep the mount namespace), then
		// containerd by its PID.
		if out, err := ctr("tasks", "ls", "-q"); err == nil {
			for _, id := range strings.Fields(out) {
				ctr("tasks", "kill", "-s", "SIGKILL", id)
				ctr("tasks", "delete", "-f", id)
				ctr("containers", "delete", id)
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("containerd log:\n%s", b)
		}
		os.RemoveAll(dir)
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := ctr("version"); err == nil {
			return ctr
		}
		if time.Now().After(deadline) {
			t.Fatal("containerd did not answer within 20 s")
		}
	}
}

// What `make image` does, twice: the same digest and the same bytes; then
// the archive imports under the manifest's image name with that digest,
// `tracer version` runs in it, found through PATH as the DaemonSet's
// command finds it, and `tracer check` works with the manifest's
// capabilities.
func TestImageReproducibleImportsAndRuns(t *testing.T) {
	requireContainerd(t)
	if testing.Short() {
		t.Skip("builds the tracer for two platforms")
	}
	dir := t.TempDir()
	var results []result
	var archives [][]byte
	for _, name := range []string{"a.tar", "b.tar"} {
		c := config{out: filepath.Join(dir, name), platforms: "linux/amd64,linux/arm64",
			source: "https://github.com/timeout-tracer/tracer", caDir: "/usr/share/ca-certificates/mozilla", goCmd: "go"}
		if _, err := os.Stat(c.caDir); err != nil {
			c.caDir = "" // no ca-certificates package: the rest still holds
		}
		res, err := build(c, testWriter{t})
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(c.out)
		if err != nil {
			t.Fatal(err)
		}
		results, archives = append(results, res), append(archives, b)
	}
	if results[0].digest != results[1].digest || !bytes.Equal(archives[0], archives[1]) {
		t.Fatalf("two builds of one commit differ: %s and %s", results[0].digest, results[1].digest)
	}
	ref := results[0].ref
	t.Logf("image %s %s, %d bytes", ref, results[0].digest, len(archives[0]))

	ctr := privateContainerd(t)
	if out, err := ctr("images", "import", filepath.Join(dir, "a.tar")); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	out, err := ctr("images", "ls")
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, out)
	}
	found := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[0] == ref {
			found = true
			if f[2] != results[0].digest || !strings.Contains(line, "linux/amd64,linux/arm64") {
				t.Errorf("imported %s, want digest %s for linux/amd64,linux/arm64", line, results[0].digest)
			}
		}
	}
	if !found {
		t.Fatalf("no image %s after the import:\n%s", ref, out)
	}
	tag, _ := tagOf(ref)
	for i, argv := range [][]string{{"tracer", "version"}, {"/usr/local/bin/tracer", "--version"}} {
		id := fmt.Sprintf("tt-image-%d-%d", os.Getpid(), i)
		out, err := ctr(append([]string{"run", "--rm", ref, id}, argv...)...)
		if err != nil {
			t.Fatalf("ctr run %v: %v\n%s", argv, err, out)
		}
		if !strings.Contains(out, "tracer "+tag) || !strings.Contains(out, "commit "+results[0].revision) {
			t.Errorf("%v in the image printed %q, want version %s and the commit", argv, out, tag)
		}
	}

	// The static binary in the image loads and attaches BPF with exactly
	// the manifest's capabilities (those this machine's root has), and says
	// what it lacks without them.
	caps, err := deploy.Capabilities()
	if err != nil {
		t.Fatal(err)
	}
	bnd, err := boundingSet()
	if err != nil {
		t.Fatal(err)
	}
	grant := []string{"run", "--rm", "--cap-drop", "CAP_ALL"}
	for _, c := range caps {
		if bit, ok := capBits[c]; ok && bnd&(1<<bit) != 0 {
			grant = append(grant, "--cap-add", "CAP_"+c)
		}
	}
	out, err = ctr(append(grant, ref, fmt.Sprintf("tt-image-%d-check", os.Getpid()), "tracer", "check")...)
	if err != nil || !strings.Contains(out, "\ntracing works") {
		t.Errorf("tracer check in the image with the manifest's capabilities (%v): %v\n%s", grant, err, out)
	}
	out, err = ctr("run", "--rm", "--cap-drop", "CAP_ALL", ref, fmt.Sprintf("tt-image-%d-nocaps", os.Getpid()), "tracer", "check")
	if err == nil || !strings.Contains(out, "grant CAP_BPF") || strings.Contains(out, "5.8") {
		t.Errorf("tracer check in the image without capabilities: %v\n%s", err, out)
	}
}

// capBits are the capabilities deploy/daemonset.yaml grants.
var capBits = map[string]uint{"BPF": 39, "PERFMON": 38, "SYS_PTRACE": 19, "SYS_RESOURCE": 24}

// boundingSet is this process's capability bounding set: runc cannot
// grant a container what it lacks (here root has no CAP_SYS_RESOURCE).
func boundingSet() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapBnd in /proc/self/status")
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
