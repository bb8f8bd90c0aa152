package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/timeout-tracer/tracer/deploy"
	"github.com/timeout-tracer/tracer/lab/testprog"
)

// TestCheckNamesWhatIsMissing runs `tracer check` as root, as nobody and
// with reduced capabilities against a root Go process, and shows that each
// refusal names the capability it lacks, and that a lack of privileges is
// never blamed on the kernel ("ring buffers need Linux 5.8"). Measured
// before: with only CAP_BPF+CAP_PERFMON check said "tracing works" and
// trace then failed on /proc/PID/exe.
func TestCheckNamesWhatIsMissing(t *testing.T) {
	requireGoTracing(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skipf("needs setpriv (util-linux): %v", err)
	}
	// A copy nobody can execute (the build cache may sit under /root).
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tracer := filepath.Join(dir, "tracer")
	b, err := os.ReadFile(testprog.Tracer(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tracer, b, 0o755); err != nil {
		t.Fatal(err)
	}

	// The target: a root Go program with every capability, waiting on stdin.
	tgt := exec.Command(testprog.Path(t, "deadlines"), "-rounds", "1")
	stdin, _ := tgt.StdinPipe()
	if err := tgt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); tgt.Process.Kill(); tgt.Wait() })
	pid := fmt.Sprint(tgt.Process.Pid)

	manifest, err := deploy.Capabilities()
	if err != nil {
		t.Fatal(err)
	}
	var grant []string // the manifest's, as far as this machine has them
	own := statusCaps(t, os.Getpid(), "CapBnd")
	for _, c := range manifest {
		if own&(1<<capBits[c]) != 0 {
			grant = append(grant, c)
		}
	}
	nobody := []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}
	rootWith := func(caps ...string) []string {
		return []string{"setpriv", "--bounding-set=-all," + deploy.SetprivCaps(caps), "--inh-caps=-all"}
	}
	for _, tc := range []struct {
		name   string
		argv   []string
		env    []string
		args   []string
		ok     bool     // exit 0 and "tracing works"
		want   []string // in the output
		either []string // if not ok: the output must say this instead
	}{
		{name: "root", args: []string{"--pid", pid}, ok: true,
			want: []string{"ok go probes", "attached the deadline probes", "ok process " + pid}},
		{name: "nobody without capabilities", argv: append(nobody, "--inh-caps=-all"),
			want: []string{"FAIL capabilities", "grant CAP_BPF (", "CAP_PERFMON (", "skip ring buffer", "skip go probes", "no CAP_SYS_PTRACE"}},
		{name: "nobody with BPF and PERFMON, root's process", args: []string{"--pid", pid},
			argv: append(nobody, "--inh-caps=+bpf,+perfmon", "--ambient-caps=+bpf,+perfmon"),
			want: []string{"FAIL process " + pid, "runs as uid 0/0/0/0, this tracer as uid 65534", "needs CAP_SYS_PTRACE", "ok tcp collector"}},
		{name: "root with BPF and PERFMON only", args: []string{"--pid", pid}, argv: rootWith("BPF", "PERFMON"),
			want: []string{"FAIL process " + pid, "holds capabilities this tracer lacks", "needs CAP_SYS_PTRACE"}},
		{name: "root with the manifest's capabilities", args: []string{"--pid", pid}, argv: rootWith(grant...), ok: true,
			want: []string{"ok process " + pid}, either: []string{"perf-event uprobes need CAP_SYS_ADMIN"}},
		{name: "manifest's capabilities, perf-event uprobes", args: []string{"--pid", pid}, argv: rootWith(grant...),
			env: []string{"TT_UPROBE=perf"}, ok: true,
			want: []string{"ok process " + pid}, either: []string{"perf-event uprobes need CAP_SYS_ADMIN", "grant CAP_SYS_ADMIN"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv := append(append(append([]string{}, tc.argv...), tracer, "check"), tc.args...)
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), tc.env...)
			out, err := cmd.CombinedOutput()
			// The table's columns, one space apart.
			s := regexp.MustCompile(`[ \t]+`).ReplaceAllString(string(out), " ")
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			works := err == nil && strings.Contains(s, "\ntracing works")
			switch {
			case tc.ok && !works && tc.either != nil:
				t.Logf("refused here (the kernel requires more): checking it says so")
				for _, w := range tc.either {
					if !strings.Contains(s, w) {
						t.Errorf("output lacks %q:\n%s", w, s)
					}
				}
			case tc.ok != works:
				t.Errorf("tracing works: %v, want %v (%v):\n%s", works, tc.ok, err, s)
			}
			for _, w := range tc.want {
				if !strings.Contains(s, w) {
					t.Errorf("output lacks %q:\n%s", w, s)
				}
			}
			if strings.Contains(s, "5.8") {
				t.Errorf("a lack of privileges blamed on the kernel version:\n%s", s)
			}
		})
	}
}
