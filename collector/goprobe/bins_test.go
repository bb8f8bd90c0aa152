package goprobe

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/gobin"
	"github.com/timeout-tracer/tracer/lab/testenv"
	"github.com/timeout-tracer/tracer/lab/testprog"
)

// TestIdleExecutableKept: in the node agent, an executable whose last
// process exited stays analysed for the next process of the same file (a
// one-shot program run every few seconds paid the whole analysis on every
// run), its tables loaded for warmFor after each attach; one rewritten in
// place meanwhile (cp over it keeps the inode) is analysed anew, and an
// idle one goes after idleLinger.
func TestIdleExecutableKept(t *testing.T) {
	requireTracing(t)
	exe := filepath.Join(t.TempDir(), "labapp")
	testenv.CopyFile(t, testprog.Path(t, "labapp"), exe, 0o755)
	n, err := NewNode(NodeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	// run starts a process of exe, adds it as the node agent does and
	// removes it once it exited, its executable then idle.
	run := func() *gobin.Binary {
		t.Helper()
		cmd := exec.Command(exe, "http-server", "-addr", "127.0.0.1:0")
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		defer cmd.Process.Kill()
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
			t.Fatalf("labapp not ready: %q %v", line, err)
		}
		p, err := n.AddBefore(cmd.Process.Pid, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.ReleaseAnalysis()
		bin := p.Binary()
		n.mu.Lock()
		warm := !n.bins[bin.File].warm.IsZero()
		n.mu.Unlock()
		if !warm {
			t.Errorf("a %d-byte executable's tables were released at once, not kept warm", bin.Size())
		}
		if err := n.Remove(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		// Its late events' linger, cut short: the next sweep drops its
		// reference.
		n.mu.Lock()
		for pid, g := range n.gone {
			g.when = time.Now().Add(-time.Hour)
			n.gone[pid] = g
		}
		n.mu.Unlock()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			n.mu.Lock()
			r, ok := n.bins[bin.File]
			idle := ok && r.refs == 0
			n.mu.Unlock()
			if idle {
				break
			}
			if !ok {
				t.Fatal("the executable was closed with its last process, not kept idle")
			}
			if time.Now().After(deadline) {
				t.Fatal("the executable's last reference was not dropped")
			}
		}
		return bin
	}

	first := run()
	if again := run(); again != first {
		t.Errorf("the next process of the file analysed it anew: the idle executable was not reused")
	}
	// Rewritten in place: same inode, another size and time.
	f, err := os.OpenFile(exe, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0})
	f.Close()
	rewritten := run()
	if rewritten == first {
		t.Errorf("an executable rewritten in place was taken for the one analysed before")
	}
	if rewritten.File != first.File {
		t.Logf("the rewrite changed the inode (%v, was %v): the test shows less than it should", rewritten.File, first.File)
	}

	n.sweepBins(time.Now().Add(warmFor + time.Second))
	n.mu.Lock()
	r := n.bins[rewritten.File]
	warm := r != nil && !r.warm.IsZero()
	n.mu.Unlock()
	if r == nil || warm {
		t.Fatalf("after warmFor the idle executable should be open and its tables released (open %v, warm %v)", r != nil, warm)
	}
	n.sweepBins(time.Now().Add(idleLinger + time.Second))
	n.mu.Lock()
	_, open := n.bins[rewritten.File]
	n.mu.Unlock()
	if open {
		t.Errorf("an executable idle for more than idleLinger is still open")
	}
}
