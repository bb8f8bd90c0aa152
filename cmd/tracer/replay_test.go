package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/lab/testprog"
)

// TestRecordReplay: record a lab run with a slow server, then replay the
// file without root: the same timeouts come out with their causes, the
// same way every time (the correlator is deterministic).
func TestRecordReplay(t *testing.T) {
	requireGoTracing(t)
	file := filepath.Join(t.TempDir(), "slow.events")
	server := []string{"http-server", "-addr", ":8080", "-delay", "400ms"}
	client := []string{"client", "-proto", "http", "-target", labTarget, "-n", "4", "-concurrency", "1", "-timeout", "150ms", "-span", "before"}
	run := runLabCmd(t, server, client, false, nil, []string{"record", "--pid", "PID", "-o", file, "--detail", "always"})
	if !strings.Contains(run.stderr, "recorded ") {
		t.Fatalf("record did not finish: %s", run.stderr)
	}
	replay := func() []byte {
		out, err := exec.Command(testprog.Tracer(t), "replay", file, "-o", "json").Output()
		if err != nil {
			t.Fatalf("replay: %v", err)
		}
		return out
	}
	first := replay()
	if second := replay(); !bytes.Equal(first, second) {
		t.Fatal("two replays of one recording differ")
	}
	var reports []export.TimeoutJSON
	sc := bufio.NewScanner(bytes.NewReader(first))
	for sc.Scan() {
		var r export.TimeoutJSON
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("replay line %q: %v", sc.Text(), err)
		}
		reports = append(reports, r)
	}
	expired := map[string]bool{}
	for _, l := range run.client {
		if l.Outcome == "deadline_exceeded" {
			expired[l.TraceID] = true
		}
	}
	if len(reports) != len(expired) || len(reports) == 0 {
		t.Fatalf("replay gave %d reports, the client logged %d expiries", len(reports), len(expired))
	}
	for _, r := range reports {
		if !expired[r.TraceID] || r.Cause == nil || r.Cause.Class != "slow_peer" || !r.Detail {
			t.Errorf("replayed report %+v (cause %+v), want a logged trace ID, detail and slow_peer", r, r.Cause)
		}
	}
}
