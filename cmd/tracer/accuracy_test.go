package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/lab/netlab"
)

// accuracyN scales the matrix: `make accuracy` runs it with -accuracy.n=40;
// the test suite's short form uses a few requests per class.
var accuracyN = flag.Int("accuracy.n", 8, "requests per scenario in the accuracy matrix")

// accScenario is one row of the accuracy matrix: lab servers, a client, a
// fault, and the class each client-logged expiry should get (by target).
type accScenario struct {
	name    string
	proto   string   // client -proto; "" is http
	servers []string // labapp server args; "--" separates servers
	client  []string // labapp client args after -proto/-target/-n
	target  string   // client -target (SERVER is replaced)
	fault   func(p *netlab.Pair) error
	after   time.Duration // when the fault goes in, after the client starts
	want    map[string]string
}

func accuracyMatrix(n int) []accScenario {
	ns := fmt.Sprint(n)
	slow := []string{"http-server", "-addr", ":8080", "-delay", "400ms"}
	fast := []string{"http-server", "-addr", ":8080", "-delay", "100ms"}
	return []accScenario{
		{name: "rto", servers: fast, target: "SERVER:8080",
			client: []string{"-n", fmt.Sprint(3 * 4), "-concurrency", "4", "-timeout", "1200ms", "-span", "before"},
			fault:  func(p *netlab.Pair) error { return p.Blackhole(8080) }, after: 150 * time.Millisecond,
			want: map[string]string{"SERVER:8080": "rto"}},
		// gRPC: every call is a stream on one shared connection, whose I/O
		// the transport's goroutines do; the call is bound to it at
		// (*http2Client).NewStream.
		{name: "grpc_rto", proto: "grpc", servers: []string{"grpc-server", "-addr", ":8080", "-delay", "100ms"}, target: "SERVER:8080",
			client: []string{"-n", fmt.Sprint(3 * 4), "-concurrency", "4", "-timeout", "1200ms", "-span", "before"},
			fault:  func(p *netlab.Pair) error { return p.Blackhole(8080) }, after: 150 * time.Millisecond,
			want: map[string]string{"SERVER:8080": "rto"}},
		{name: "syn_timeout", servers: fast, target: "SERVER:8080",
			client: []string{"-n", ns, "-concurrency", "2", "-timeout", "1500ms", "-span", "before"},
			fault:  func(p *netlab.Pair) error { return p.DropSYN(8080) },
			want:   map[string]string{"SERVER:8080": "syn_timeout"}},
		{name: "refused", servers: fast, target: "SERVER:9",
			client: []string{"-n", ns, "-concurrency", "2", "-timeout", "300ms", "-span", "before", "-retry"},
			want:   map[string]string{"SERVER:9": "refused"}},
		{name: "slow_peer", servers: slow, target: "SERVER:8080",
			client: []string{"-n", ns, "-concurrency", "2", "-timeout", "150ms", "-span", "before"},
			want:   map[string]string{"SERVER:8080": "slow_peer"}},
		{name: "local", servers: fast, target: "SERVER:8080",
			client: []string{"-n", ns, "-concurrency", "2", "-timeout", "150ms", "-span", "before", "-local-wait", "2s"},
			want:   map[string]string{"SERVER:8080": "local"}},
		// A bulk upload (-req-bytes) over a link that loses a few percent of
		// what the client sends (handshakes spared): the client's socket
		// retransmits in fast recovery, and a tight deadline expires
		// mid-upload. Loss on the response would make the server's socket
		// retransmit, which is not the traced process's connection. On the
		// lab's veth (RTT ~50 µs) fast recovery costs next to nothing: the
		// uploads that miss the deadline are the ones where a loss escalated
		// to an RTO, so rto is a right answer here too (see score).
		{name: "fast_retransmit", servers: []string{"http-server", "-addr", ":8080"}, target: "SERVER:8080",
			client: []string{"-n", fmt.Sprint(2 * n), "-concurrency", "2", "-timeout", "100ms", "-span", "before", "-req-bytes", "16000000"},
			fault:  func(p *netlab.Pair) error { return p.LossAfterHandshake(8080, 0.08) },
			want:   map[string]string{"SERVER:8080": "fast_retransmit"}},
		{name: "healthy", servers: []string{"http-server", "-addr", ":8080"}, target: "SERVER:8080",
			client: []string{"-n", ns, "-concurrency", "2", "-timeout", "1s", "-span", "before"},
			want:   map[string]string{}},
		{name: "mixed", servers: append(append(slow, "--"), "http-server", "-addr", ":8081", "-delay", "100ms"),
			target: "SERVER:8080,SERVER:8081",
			client: []string{"-n", fmt.Sprint(2 * n), "-concurrency", "2", "-timeout", "250ms", "-span", "before"},
			fault:  func(p *netlab.Pair) error { return p.Blackhole(8081) }, after: 150 * time.Millisecond,
			want: map[string]string{"SERVER:8080": "slow_peer", "SERVER:8081": "rto"}},
	}
}

// accRow is what one scenario and detail mode scored.
type accRow struct {
	scenario, detail             string
	logged, reported, rightTrace int
	sure, rightSure              int // exact and probable reports, and those with the right class
	byConfidence                 map[string]int
	byClass                      map[string]int
	blamedNetwork                int // slow_peer/local expiries given a network class: must be 0
	// Exact and probable reports naming a local class (cpu_throttled,
	// runqueue_delay, gc_pause), and those of them whose own figure does
	// not reach the rule's 30 % of the life (must be 0).
	localClass, localUnsupported int
	// Run-queue classes whose figure the kernel's schedstat confirms
	// (tracer/kernel ms; not counted in localClass), and the others.
	localConfirmed, localUnconfirmed []string
	falseReports                     int // reports matching no logged expiry
	stderr                           string
	// misses: the sure reports with another class than the scenario's,
	// each with its evidence, printed when the row fails.
	misses []string
}

func runAccuracy(t *testing.T, sc accScenario, detail string) accRow {
	t.Helper()
	proto := sc.proto
	if proto == "" {
		proto = "http"
	}
	client := append([]string{"client", "-proto", proto, "-target", sc.target}, sc.client...)
	var during func(*netlab.Pair)
	if sc.fault != nil {
		during = func(p *netlab.Pair) {
			time.Sleep(sc.after)
			if err := sc.fault(p); err != nil {
				t.Error(err)
			}
		}
	}
	// Faults that must be there from the start go in before the client runs.
	if sc.after == 0 && sc.fault != nil {
		run := runLabCmd(t, sc.servers, client, false, nil, []string{"trace", "--pid", "PID", "-o", "json", "--detail", detail}, sc.fault)
		return score(sc, detail, run)
	}
	run := runLabCmd(t, sc.servers, client, false, during, []string{"trace", "--pid", "PID", "-o", "json", "--detail", detail})
	return score(sc, detail, run)
}

func score(sc accScenario, detail string, run labRun) accRow {
	row := accRow{scenario: sc.name, detail: detail, byConfidence: map[string]int{}, byClass: map[string]int{}, stderr: run.stderr}
	want := map[string]string{} // trace ID -> expected class
	raced := map[string]bool{}  // requests whose timer may fire after an answer
	for _, l := range run.client {
		switch l.Outcome {
		case "deadline_exceeded":
			row.logged++
			want[l.TraceID] = sc.want["SERVER"+l.Target[strings.LastIndex(l.Target, ":"):]]
		case "remote_deadline_exceeded", "ok", "error":
			raced[l.TraceID] = true
		}
	}
	for _, r := range run.reports {
		exp, ok := want[r.TraceID]
		if !ok {
			if !raced[r.TraceID] || r.TraceID == "" {
				row.falseReports++
			}
			continue
		}
		row.reported++
		row.rightTrace++
		conf, class := "none", ""
		if r.Cause != nil {
			conf, class = string(r.Cause.Confidence), string(r.Cause.Class)
		}
		row.byConfidence[conf]++
		row.byClass[class]++
		// An unknown class asserts no cause: it is not counted as a sure
		// answer even when the connection is exactly bound (e.g. a dial
		// bound to its request whose SYN was unanswered for less than the
		// first SYN retry: the correlator will not call that a timeout).
		if (conf == "exact" || conf == "probable") && localFigure(r.Cause) >= 0 {
			// The lab makes network faults; it does not control the
			// machine's CPU. A local class is the correlator's reading of
			// starvation it measured on a shared machine (seen in CI: the
			// mixed row's slow peer called runqueue_delay twice), which
			// the lab cannot score: not a sure answer about the network,
			// but its figure must carry the rule, and it must stay rare.
			if l := r.Cause.Local; l == nil || localFigure(r.Cause) < 0.3*l.WindowMs {
				row.localUnsupported++
			}
			// A run-queue figure the kernel's own account confirms is the
			// machine's doing, not the tracer's: it is printed, and only
			// the unconfirmed ones count against the cap below.
			if k, ok := kernelConfirms(run.sched, r.Cause); ok {
				row.localConfirmed = append(row.localConfirmed, fmt.Sprintf("%.0f/%.0f ms", localFigure(r.Cause), k))
			} else {
				row.localClass++
				row.localUnconfirmed = append(row.localUnconfirmed, fmt.Sprintf("%s %.0f ms of %.0f (kernel: %.0f ms)", r.Cause.Class, localFigure(r.Cause), r.Cause.Local.WindowMs, k))
			}
		} else if (conf == "exact" || conf == "probable") && class != "unknown" {
			row.sure++
			if class == exp || (exp == "rto" && (class == "tlp" || class == "syn_timeout")) ||
				(exp == "fast_retransmit" && (class == "rto" || class == "tlp")) {
				row.rightSure++
			} else {
				row.misses = append(row.misses, fmt.Sprintf("%s/%s, want %s: %s (note: %s; waiting_at %q, waiting_conns %v); connections: %s",
					class, conf, exp, r.Cause.Summary, r.Cause.Note, r.WaitingAt, r.WaitingConns, connEvents(r)))
			}
		}
		if (exp == "slow_peer" || exp == "local") && networkClasses[class] {
			row.blamedNetwork++
		}
	}
	return row
}

func printAccuracy(rows []accRow) {
	tw := tabwriter.NewWriter(os.Stderr, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tDETAIL\tLOGGED\tREPORTED\tRIGHT TRACE\tRIGHT CLASS (exact+probable)\tCONFIDENCE\tCLASSES\tNETWORK BLAMED WRONGLY\tFALSE REPORTS")
	for _, r := range rows {
		var confs []string
		for k, v := range r.byConfidence {
			confs = append(confs, fmt.Sprintf("%s=%d", k, v))
		}
		sort.Strings(confs)
		var classes []string
		for k, v := range r.byClass {
			classes = append(classes, fmt.Sprintf("%s=%d", k, v))
		}
		sort.Strings(classes)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d/%d\t%s\t%s\t%d\t%d\n", r.scenario, r.detail, r.logged, r.reported, r.rightTrace,
			r.rightSure, r.sure, strings.Join(confs, " "), strings.Join(classes, " "), r.blamedNetwork, r.falseReports)
	}
	tw.Flush()
}

// TestAccuracyMatrix runs the lab through the scenario matrix in auto and
// always detail and holds the targets: every client-logged expiry
// reported with its trace ID; >= 97% right class among exact and probable
// reports; no network cause ever given to a slow_peer or local timeout.
// `make accuracy` runs it larger (-accuracy.n=40) and prints the table.
func TestAccuracyMatrix(t *testing.T) {
	requireGoTracing(t)
	var rows []accRow
	for _, sc := range accuracyMatrix(*accuracyN) {
		for _, detail := range []string{"auto", "always"} {
			t.Run(sc.name+"/"+detail, func(t *testing.T) {
				row := runAccuracy(t, sc, detail)
				rows = append(rows, row)
				if row.reported != row.logged {
					t.Errorf("%d expiries logged, %d reported; tracer said: %s", row.logged, row.reported, row.stderr)
				}
				if row.blamedNetwork > 0 {
					t.Errorf("%d slow_peer/local timeouts blamed on the network", row.blamedNetwork)
				}
				if row.falseReports > 0 {
					t.Errorf("%d reports match no logged expiry", row.falseReports)
				}
				// >= 97 %; in a short row (fewer than 34 sure reports) one miss
				// is already more than 3 %, so a single one is tolerated there
				// and printed in the table (make accuracy runs the long form).
				if miss := row.sure - row.rightSure; row.sure > 0 && float64(row.rightSure)/float64(row.sure) < 0.97 && !(row.sure < 34 && miss <= 1) {
					t.Errorf("right class %d/%d among exact and probable reports, want >= 97%%:\n%s", row.rightSure, row.sure, strings.Join(row.misses, "\n"))
				} else if len(row.misses) > 0 {
					t.Logf("%d of %d sure reports with another class:\n%s", len(row.misses), row.sure, strings.Join(row.misses, "\n"))
				}
				if row.localUnsupported > 0 {
					t.Errorf("%d local classes whose figure is under 30 %% of the life", row.localUnsupported)
				}
				if len(row.localConfirmed) > 0 {
					t.Logf("%d run-queue classes the kernel's schedstat confirms (tracer/kernel): %v", len(row.localConfirmed), row.localConfirmed)
				}
				if row.localClass*5 > row.reported {
					t.Errorf("%d of %d reports name a local class the kernel's run-queue account does not confirm: more than a busy machine explains: %v", row.localClass, row.reported, row.localUnconfirmed)
				}
				if sc.name != "healthy" && row.logged == 0 {
					t.Errorf("no expiry in scenario %s: it proves nothing", sc.name)
				}
			})
		}
	}
	printAccuracy(rows)
}

// kernelConfirms: c is runqueue_delay and the kernel's schedstat shows
// the traced process's threads waiting for a CPU at least 70 % as long in
// the report's window (the two are the same measure: the BPF hooks and
// the scheduler's bookkeeping agree within a few %, and the 10 ms samples
// blur the window's edges). k is the kernel's figure, -1 when unknown.
func kernelConfirms(s *schedSampler, c *correlate.Cause) (k float64, ok bool) {
	if c == nil || c.Class != correlate.ClassRunqueueDelay || c.Local == nil || c.Local.RunqueueMs == nil {
		return -1, false
	}
	k, ok = s.runqueueMs(c.Window.Start, c.Window.End)
	if !ok {
		return -1, false
	}
	return k, k >= 0.7**c.Local.RunqueueMs
}

// localFigure is the figure of a local class in ms (the run-queue time
// less the throttled time for runqueue_delay, as the correlator compares
// them), or -1 when the class is not local.
func localFigure(c *correlate.Cause) float64 {
	if c == nil {
		return -1
	}
	l := c.Local
	val := func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return *p
	}
	switch c.Class {
	case correlate.ClassCPUThrottled:
		if l == nil {
			return 0
		}
		return val(l.ThrottledMs)
	case correlate.ClassRunqueueDelay:
		if l == nil {
			return 0
		}
		return val(l.RunqueueMs) - val(l.ThrottledMs)
	case correlate.ClassGCPause:
		if l == nil {
			return 0
		}
		return val(l.GCPauseMs)
	}
	return -1
}
