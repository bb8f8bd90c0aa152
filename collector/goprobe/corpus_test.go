package goprobe

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/lab/fuzzcorpus"
	"github.com/timeout-tracer/tracer/lab/testenv"
	"github.com/timeout-tracer/tracer/lab/testprog"
)

var writeCorpus = flag.Bool("corpus.write", false, "capture real kernel records into the fuzzers' testdata/fuzz corpora (root, fault lab)")

// requireTracing is the one skip helper of the kernel tests.
func requireTracing(t *testing.T) {
	t.Helper()
	testenv.Root(t)
	if err := collector.Preflight(); err != nil {
		t.Skipf("kernel tracing unavailable: %v", err)
	}
}

// TestCaptureGoCorpus writes FuzzDecodeDeadline's and FuzzDecodeCall's
// corpora: the deadline and binding records the Go probes wrote while the
// deadlines test program ran with the detail tier on (timer fired and
// expired at creation, with and without creation details; net/http round
// trips with their connection). Run with -corpus.write (root).
func TestCaptureGoCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("captures the fuzz corpus only with -corpus.write")
	}
	requireTracing(t)
	evs, binds := fuzzcorpus.Samples{Per: 2}, fuzzcorpus.Samples{Per: 3}
	kindOff := unsafe.Offsetof(godeadlineTtGoEvent{}.Kind)
	createdOff := unsafe.Offsetof(godeadlineTtGoEvent{}.CreatedNs)
	bkindOff := unsafe.Offsetof(gocallsTtGoBinding{}.Kind)
	tap := func(ring string, raw []byte) {
		switch ring {
		case "go_events":
			key := "short"
			if uintptr(len(raw)) >= createdOff+8 {
				key = event.ExpiryKind(raw[kindOff]).String()
				if raw[createdOff] != 0 || raw[createdOff+7] != 0 {
					key += "-detail"
				}
			}
			evs.Add(key, raw)
		case "go_bindings":
			key := "short"
			if uintptr(len(raw)) > bkindOff {
				key = fmt.Sprintf("binding-kind%d", raw[bkindOff])
			}
			binds.Add(key, raw)
		}
	}
	// Once with the cold tier alone, once with the detail tier too.
	for _, detail := range []bool{false, true} {
		runDeadlines(t, detail, tap)
	}
	evs.Write(t, "FuzzDecodeDeadline")
	binds.Write(t, "FuzzDecodeCall")
}

// runDeadlines runs the deadlines program once under the Go probes.
func runDeadlines(t *testing.T, detail bool, tap func(string, []byte)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testprog.Path(t, "deadlines"), "-rounds", "3")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	br := bufio.NewReader(stdout)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("target not ready: %q %v", line, err)
	}
	p, err := Start(Config{PID: cmd.Process.Pid, PollInterval: 20 * time.Millisecond, tap: tap})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, drain := range []func(){
		func() {
			for range p.Calls() {
			}
		},
		func() {
			for range p.Events() {
			}
		},
		func() {
			for range p.Bindings() {
			}
		},
	} {
		go drain()
	}
	if err := p.SetDetail(detail); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	if _, err := br.ReadString('\n'); err != nil { // the target's own counts
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
}
