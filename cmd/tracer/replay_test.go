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

// TestReplayReproducesTrace: what `tracer trace` printed live — timeout
// reports, deadline_missing and hung_call lines — comes out of `tracer
// replay` of the stream it recorded (--record), line for line: the merge,
// the audit and the correlator are one pure, event-time stream.
func TestReplayReproducesTrace(t *testing.T) {
	requireGoTracing(t)
	cases := []struct {
		name   string
		server []string
		client []string
		trace  []string
		kinds  []string // kinds of line the run must print
	}{
		{"audit", []string{"http-server", "-addr", ":8080", "-delay", "1500ms"},
			[]string{"client", "-proto", "http", "-target", labTarget, "-n", "3", "-concurrency", "1", "-timeout", "0", "-span", "before"},
			[]string{"--audit", "--hang-after", "1s", "--detail", "never"}, []string{"deadline_missing", "hung_call"}},
		{"timeouts", []string{"http-server", "-addr", ":8080", "-delay", "400ms"},
			[]string{"client", "-proto", "http", "-target", labTarget, "-n", "4", "-concurrency", "2", "-timeout", "150ms", "-span", "before"},
			[]string{"--detail", "auto"}, []string{"timeout"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), tc.name+".events")
			args := append([]string{"trace", "--pid", "PID", "-o", "json", "--record", file}, tc.trace...)
			run := runLabCmd(t, tc.server, tc.client, false, nil, args)
			var live []string
			kinds := map[string]int{}
			for _, l := range run.lines {
				var k struct{ Kind string }
				if json.Unmarshal([]byte(l), &k) != nil || k.Kind == "detail" {
					continue // detail switches are the live run's, not the stream's
				}
				kinds[k.Kind]++
				live = append(live, l)
			}
			for _, k := range tc.kinds {
				if kinds[k] == 0 {
					t.Fatalf("the live run printed no %s line: %v\n%s", k, run.lines, run.stderr)
				}
			}
			hang := "10s"
			for i, a := range tc.trace {
				if a == "--hang-after" {
					hang = tc.trace[i+1]
				}
			}
			out, err := exec.Command(testprog.Tracer(t), "replay", file, "-o", "json", "--hang-after", hang).Output()
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			replayed := strings.Split(strings.TrimSpace(string(out)), "\n")
			if strings.Join(replayed, "\n") != strings.Join(live, "\n") {
				t.Errorf("replay differs from the live run:\nlive:\n%s\nreplay:\n%s", strings.Join(live, "\n"), out)
			}
		})
	}
}
