package correlate

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/timeout-tracer/tracer/record"
)

var (
	update      = flag.Bool("update", false, "rewrite testdata/*.golden from the correlator's output")
	regenEvents = flag.Bool("regen-events", false, "rewrite testdata/*.events from the scenarios in scenarios_test.go")
)

// TestEventFilesMatchScenarios keeps the committed recordings and the
// scenario code that wrote them in step. Recordings without a scenario
// (from real runs) are golden-tested all the same.
func TestEventFilesMatchScenarios(t *testing.T) {
	for _, name := range sortedKeys(goldenCases) {
		sc := goldenCases[name].build()
		var buf bytes.Buffer
		w, err := record.NewWriter(&buf, record.Header{Host: "lab-synthetic", Started: baseWall, Note: sc.note})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range sc.events() {
			if err := w.Write(ev); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		path := filepath.Join("testdata", name+".events")
		if *regenEvents {
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./correlate -regen-events -update)", err)
		}
		if !bytes.Equal(got, buf.Bytes()) {
			t.Errorf("%s differs from its scenario: run go test ./correlate -regen-events -update and review the diff", path)
		}
	}
}

// TestGolden replays every recording in testdata and compares the reports
// with the golden file; for synthetic scenarios it also checks each
// report's class and confidence against what the rules promise.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.events"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings in testdata: %v", err)
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".events")
		t.Run(name, func(t *testing.T) {
			reports, out := replayFile(t, path)
			golden := strings.TrimSuffix(path, ".events") + ".golden"
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./correlate -update)", err)
			}
			if !bytes.Equal(out, want) {
				t.Errorf("output differs from %s (run go test ./correlate -update and review the diff):\n%s", golden, out)
			}
			gc, ok := goldenCases[name]
			if !ok || gc.want == nil {
				return
			}
			if len(reports) != len(gc.want) {
				t.Fatalf("%d reports, want %d", len(reports), len(gc.want))
			}
			for i, r := range reports {
				if w := gc.want[i]; r.Cause.Class != w.class || r.Cause.Confidence != w.conf {
					t.Errorf("report %d (pid %d, goroutine %d): %s/%s, want %s/%s: %s", i, r.Deadline.PID, r.Deadline.CreatedGoid,
						r.Cause.Class, r.Cause.Confidence, w.class, w.conf, r.Cause.Summary)
				}
			}
		})
	}
}

// goldenReport is what a golden file shows of a report: the deadline's
// identity and the whole cause.
type goldenReport struct {
	ExpiryMono  uint64 `json:"expiry_mono"`
	PID         uint32 `json:"pid"`
	Ctx         string `json:"ctx"`
	Detail      bool   `json:"detail"`
	CreatedGoid uint64 `json:"created_goroutine,omitempty"`
	CreatedAt   string `json:"created_at,omitempty"`
	TraceID     string `json:"trace_id,omitempty"`
	Cause       Cause  `json:"cause"`
}

func replayFile(t *testing.T, path string) ([]Report, []byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := record.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var reports []Report
	stats, err := Replay(r, StreamConfig{}, Outputs{ReportFunc: func(rep *Report) error {
		reports = append(reports, *rep)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, rep := range reports {
		g := goldenReport{ExpiryMono: rep.Deadline.Mono, PID: rep.Deadline.PID, Ctx: fmt.Sprintf("%#x", rep.Deadline.Ctx),
			Detail: rep.Deadline.Detail, CreatedGoid: rep.Deadline.CreatedGoid, CreatedAt: rep.Deadline.CreatedAt,
			TraceID: rep.Deadline.TraceID, Cause: rep.Cause}
		b, err := json.MarshalIndent(g, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		buf.WriteString("\n")
	}
	b, _ := json.Marshal(stats)
	fmt.Fprintf(&buf, "stats: %s\n", b)
	return reports, buf.Bytes()
}

// TestMixedRunNeverBlamesTheNetworkForSlowRequests is the accuracy target
// on the mixed run: with exact bindings, every request to the slow backend
// is slow_peer and every one to the lossy backend rto; without detail no
// network cause is given unless the connection the process closed with
// the call says it; the semaphore waiter is local.
func TestMixedRunNeverBlamesTheNetworkForSlowRequests(t *testing.T) {
	reports, _ := replayFile(t, filepath.Join("testdata", "mixed.events"))
	var slow, lossy, cold, local int
	for _, r := range reports {
		c, d := r.Cause, r.Deadline
		switch {
		case !d.Detail:
			// Without bindings: unknown, or the truth when the
			// connection closed with the call says it (the first, to
			// the slow backend, is closed 0.6 ms after its expiry; the
			// second's stays open).
			cold++
			truth := ClassRTO
			if d.Mono < mono(850) {
				truth = ClassSlowPeer
			}
			if c.Class != ClassUnknown && c.Class != truth {
				t.Errorf("cold-path deadline at %d: %s/%s (%s), the request was %s", d.Mono, c.Class, c.Confidence, c.Summary, truth)
			}
		case strings.HasPrefix(d.CreatedAt, "main.callSlow"):
			slow++
			if c.Class != ClassSlowPeer || c.Confidence != Exact {
				t.Errorf("slow request of goroutine %d: %s/%s (%s)", d.CreatedGoid, c.Class, c.Confidence, c.Summary)
			}
		case strings.HasPrefix(d.CreatedAt, "main.callLossy"):
			lossy++
			if c.Class != ClassRTO || c.Confidence != Exact {
				t.Errorf("lossy request of goroutine %d: %s/%s (%s)", d.CreatedGoid, c.Class, c.Confidence, c.Summary)
			}
		case strings.HasPrefix(d.CreatedAt, "main.acquire"):
			local++
			if c.Class != ClassLocal {
				t.Errorf("semaphore waiter: %s/%s (%s)", c.Class, c.Confidence, c.Summary)
			}
		}
	}
	if slow != 10 || lossy != 10 || cold != 2 || local != 1 {
		t.Errorf("reports: %d slow, %d lossy, %d cold, %d local; want 10, 10, 2, 1", slow, lossy, cold, local)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
