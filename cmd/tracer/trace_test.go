package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/lab/testenv"
	"github.com/timeout-tracer/tracer/lab/testprog"
)

// targetCounts is what the deadlines target counts itself.
type targetCounts struct {
	Expired    int `json:"expired"`
	AtCreation int `json:"at_creation"`
	Met        int `json:"met"`
	HTTP       int `json:"http"`
	Dial       int `json:"dial"` // dials expired in SYN retries (-dial), among Expired
	// DialerTimeout: of Dial, those under net.Dialer's Timeout (the
	// budget), in a context of no deadline.
	DialerTimeout int `json:"dialer_timeout"`
}

// traceRun is one traced run of the deadlines target.
type traceRun struct {
	target   targetCounts
	reports  []export.TimeoutJSON
	switches []export.DetailJSON
	order    []string // "timeout" / "detail:on" / "detail:off", in output order
	stderr   string
}

func requireGoTracing(t *testing.T) {
	t.Helper()
	testenv.Root(t)
	if err := collector.Preflight(); err != nil {
		t.Skipf("kernel tracing unavailable: %v", err)
	}
}

// runTraced starts the target (paused), attaches `tracer trace`, lets the
// target run, and collects both sides' output until the target exits.
func runTraced(t *testing.T, target string, targetArgs []string, traceArgs ...string) traceRun {
	t.Helper()
	tgt := exec.Command(target, targetArgs...)
	stdin, _ := tgt.StdinPipe()
	tout, _ := tgt.StdoutPipe()
	if err := tgt.Start(); err != nil {
		t.Fatal(err)
	}
	defer tgt.Process.Kill()
	br := bufio.NewReader(tout)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("target not ready: %q %v", line, err)
	}

	args := append([]string{"trace", "--pid", fmt.Sprint(tgt.Process.Pid), "-o", "json"}, traceArgs...)
	tr := exec.Command(testprog.Tracer(t), args...)
	var stderr bytes.Buffer
	tr.Stderr = &stderr
	out, _ := tr.StdoutPipe()
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	defer tr.Process.Kill()
	// Attached once it says so on stderr.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(stderr.String(), "tracing pid"); {
		if time.Now().After(deadline) {
			t.Fatalf("tracer did not attach: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	io.WriteString(stdin, "go\n")

	var run traceRun
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var kind struct{ Kind string }
		if err := json.Unmarshal(sc.Bytes(), &kind); err != nil {
			t.Fatalf("not JSON: %q", sc.Text())
		}
		switch kind.Kind {
		case "timeout":
			var r export.TimeoutJSON
			json.Unmarshal(sc.Bytes(), &r)
			run.reports = append(run.reports, r)
			run.order = append(run.order, "timeout")
		case "detail":
			var d export.DetailJSON
			json.Unmarshal(sc.Bytes(), &d)
			run.switches = append(run.switches, d)
			run.order = append(run.order, fmt.Sprintf("detail:%v", map[bool]string{true: "on", false: "off"}[d.Detail]))
		default:
			t.Fatalf("unknown kind in %s", sc.Text())
		}
	}
	if err := tr.Wait(); err != nil {
		t.Fatalf("tracer: %v\n%s", err, stderr.String())
	}
	run.stderr = stderr.String()
	rest, _ := io.ReadAll(br)
	if err := json.Unmarshal(rest, &run.target); err != nil {
		t.Fatalf("target output %q: %v", rest, err)
	}
	tgt.Wait()
	if !strings.Contains(run.stderr, fmt.Sprintf("process %d exited", tgt.Process.Pid)) {
		t.Errorf("tracer did not report the target's exit: %s", run.stderr)
	}
	return run
}

// checkExact: the tracer reports exactly the target's own expiries, and
// never a deadline that was met.
func checkExact(t *testing.T, run traceRun) {
	t.Helper()
	if len(run.reports) != run.target.Expired {
		t.Fatalf("tracer reported %d expiries, the target counted %d (%+v)", len(run.reports), run.target.Expired, run.target)
	}
	at := 0
	for _, r := range run.reports {
		if r.Outcome != "deadline_exceeded" || r.Kind != "timeout" || r.PID == 0 || r.Comm == "" {
			t.Errorf("bad report %+v", r)
		}
		if r.Expiry == "expired_at_creation" {
			at++
			continue
		}
		reported, _ := time.Parse(time.RFC3339Nano, r.Time)
		deadline, _ := time.Parse(time.RFC3339Nano, r.Deadline)
		// Met deadlines are 5 s away: a report of one would stand out.
		if d := reported.Sub(deadline); d < 0 || d > time.Second {
			t.Errorf("report %v after its deadline: not an expiry: %+v", d, r)
		}
	}
	if at != run.target.AtCreation {
		t.Errorf("%d expired-at-creation reports, target counted %d", at, run.target.AtCreation)
	}
	for _, r := range run.reports {
		if r.Children > 1 {
			t.Errorf("children %d: the target never gives a deadline more than one child", r.Children)
		}
	}
}

var createdRE = regexp.MustCompile(`^(\S+) \((.+):(\d+)\)$`)

// markerLines maps "created:<fn>" markers of the target's source to lines.
func markerLines(t *testing.T) map[string]int {
	src, err := os.ReadFile("../../lab/testprog/deadlines/main.go")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for i, line := range strings.Split(string(src), "\n") {
		if _, fn, ok := strings.Cut(line, "// created:"); ok {
			m["main."+strings.TrimSpace(fn)] = i + 1
		}
	}
	return m
}

// checkDetail: every report has the right budget and the right creator.
func checkDetail(t *testing.T, run traceRun, budget time.Duration) {
	t.Helper()
	lines := markerLines(t)
	for _, r := range run.reports {
		if !r.Detail || r.BudgetMs == nil || r.ElapsedMs == nil || r.CreatedAt == nil {
			t.Errorf("report without detail: %+v", r)
			continue
		}
		want := float64(budget.Milliseconds())
		if r.Expiry == "expired_at_creation" {
			want = -1000
		}
		if d := *r.BudgetMs - want; d < -5 || d > 5 {
			t.Errorf("budget %.1f ms, want %.0f ±5 (%s)", *r.BudgetMs, want, *r.CreatedAt)
		}
		m := createdRE.FindStringSubmatch(*r.CreatedAt)
		if m == nil {
			t.Errorf("created_at %q is not \"function (file:line)\"", *r.CreatedAt)
			continue
		}
		if strings.HasPrefix(m[1], "net/http.") {
			continue // http.Client.Timeout: net/http sets the deadline
		}
		line, ok := lines[m[1]]
		if !ok || !strings.HasSuffix(m[2], "deadlines/main.go") || m[3] != fmt.Sprint(line) {
			t.Errorf("created_at %q, want one of the marked lines %v", *r.CreatedAt, lines)
		}
	}
}

func TestTraceNeverExact(t *testing.T) {
	requireGoTracing(t)
	run := runTraced(t, testprog.Path(t, "deadlines"), []string{"-rounds", "5"}, "--detail", "never")
	checkExact(t, run)
	fromClient := 0
	for _, r := range run.reports {
		if r.Detail || r.CreatedAt != nil {
			t.Errorf("detail fields without detail probes: %+v", r)
		}
		if r.BudgetMs == nil && r.BudgetFrom == "" {
			continue
		}
		// net/http's Client.Timeout (30 ms, the target's -budget) is read
		// at the expiry from the waiting request's (*Client).send frame:
		// the budget of the deadline the client made from it, with no
		// detail probe. No other deadline has a budget here.
		if r.BudgetFrom != "client_timeout" || r.BudgetMs == nil || *r.BudgetMs != 30 || !strings.HasPrefix(r.WaitingAt, "net/http.") {
			t.Errorf("budget_ms %s from %q waiting at %q, want 30 from client_timeout on http.Client timeouts only", jsonOf(r.BudgetMs), r.BudgetFrom, r.WaitingAt)
			continue
		}
		fromClient++
	}
	if run.target.HTTP == 0 {
		t.Error("the http.Client timeout scenario did not run")
	}
	if fromClient != run.target.HTTP {
		t.Errorf("%d reports with the budget of Client.Timeout, want one per http.Client timeout (%d)", fromClient, run.target.HTTP)
	}
}

func TestTraceAlwaysDetail(t *testing.T) {
	requireGoTracing(t)
	run := runTraced(t, testprog.Path(t, "deadlines"), []string{"-rounds", "5", "-budget", "30ms"}, "--detail", "always")
	checkExact(t, run)
	checkDetail(t, run, 30*time.Millisecond)
	if len(run.switches) != 1 || !run.switches[0].Detail {
		t.Errorf("want one detail:on line, got %+v", run.switches)
	}
}

// TestTraceAutoDetail: a burst of expiries switches detail on, a quiet
// period switches it off; reports before the switch come from the cold tier.
func TestTraceAutoDetail(t *testing.T) {
	requireGoTracing(t)
	run := runTraced(t, testprog.Path(t, "deadlines"), []string{"-rounds", "4", "-http=false", "-linger", "3s"},
		"--detail", "auto", "--detail-threshold", "3", "--detail-window", "10s", "--detail-quiet", "1s")
	checkExact(t, run)
	// Reports are printed after the correlator's grace window, switches at
	// once: check the switches' order and which reports have detail.
	got := strings.Join(run.order, " ")
	if strings.Count(got, "detail:on") != 1 || !strings.HasSuffix(got, "detail:off") || strings.Count(got, "detail:off") != 1 {
		t.Fatalf("want one detail:on and, last, one detail:off; got %s", got)
	}
	if run.reports[0].Detail || run.reports[2].Detail {
		t.Error("reports before the switch claim detail")
	}
	late := run.reports[len(run.reports)-4:] // a whole round after the switch
	for _, r := range late {
		if !r.Detail {
			t.Errorf("report after the switch lacks detail: %+v", r)
		}
	}
}

// TestTraceBuildVariants: stripped, PIE and -trimpath builds, and another
// toolchain, are traced exactly, with creators resolved.
func TestTraceBuildVariants(t *testing.T) {
	requireGoTracing(t)
	variants := []struct {
		name  string
		env   []string
		flags []string
	}{
		{"stripped", nil, []string{"-ldflags=-s -w"}},
		{"pie", nil, []string{"-buildmode=pie"}},
		{"trimpath", nil, []string{"-trimpath"}},
		{"stripped-pie", nil, []string{"-buildmode=pie", "-ldflags=-s -w"}},
		// Another toolchain, fetched from the module proxy on first use.
		{"go1.27.3", []string{"GOTOOLCHAIN=go1.27.3"}, nil},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			bin := testprog.Variant(t, "deadlines", v.name, v.env, v.flags...)
			run := runTraced(t, bin, []string{"-rounds", "3", "-http=false"}, "--detail", "always")
			checkExact(t, run)
			for _, r := range run.reports {
				if r.CreatedAt == nil || !strings.HasPrefix(*r.CreatedAt, "main.") {
					t.Errorf("creator not resolved: %+v", r)
				}
				// Each deadline's goroutine waits on its Done (or a
				// child's) in main: read at the expiry, stripped too. One
				// already past when set has no waiter yet.
				if r.Expiry == "timer_fired" && !strings.HasPrefix(r.WaitingAt, "main.") {
					t.Errorf("waiting_at %q (stack %q), want main.*", r.WaitingAt, r.WaitingStack)
				}
			}
		})
	}
}

// TestTraceOldToolchain: a target built with Go 1.22 (fetched from the
// module proxy on first use), with no detail tier. Three things such a
// binary lost before session 22: its context walk (Go 1.21 and 1.22 keep
// withoutCancelCtx's itab without its DWARF type; ContextItabs failed on
// it), the children of an expiring context (a runtime.hmap before Go 1.24,
// not a swiss map: outerShort's goroutine waits on a child), and a dial
// whose socket deadline fired first (found in connect's frame: its
// goroutine waits in the poller, its interrupter on the context). Every
// expiry reported once; every fired timer's waiting_at in main or
// net/http, or connect for the dials, each bound through it.
func TestTraceOldToolchain(t *testing.T) {
	requireGoTracing(t)
	bin := testprog.Standalone(t, "deadlines", "go1.22.12", []string{"GOTOOLCHAIN=go1.22.12"})
	run := runTraced(t, bin, []string{"-rounds", "3", "-dial", "-budget", "300ms"}, "--detail", "never")
	checkExact(t, run)
	dials, outer, dialerBudget := 0, 0, 0
	for _, r := range run.reports {
		if r.Expiry != "timer_fired" {
			continue
		}
		switch {
		case strings.HasPrefix(r.WaitingAt, "net.(*netFD).connect"):
			dials++
			// A dial under net.Dialer's Timeout: its budget read at the
			// expiry (DialContext's deferred cancel holds the deadline;
			// Go 1.22 defers WithDeadline's cancel itself).
			if r.BudgetFrom == "dialer_timeout" {
				if r.BudgetMs == nil || *r.BudgetMs != 300 {
					t.Errorf("a dial's budget %v from dialer_timeout, want 300", jsonOf(r.BudgetMs))
				}
				dialerBudget++
			}
			via := false
			if r.Cause != nil {
				for _, c := range r.Cause.Connections {
					via = via || c.Via == "waiting:net.(*netFD).connect"
				}
			}
			if !via {
				t.Errorf("a dial's report not bound through connect (timer %q): %s", r.Timer, causeText(r.Cause))
			}
		case strings.HasPrefix(r.WaitingAt, "main.outerShort"):
			outer++
		case strings.HasPrefix(r.WaitingAt, "main.") || strings.HasPrefix(r.WaitingAt, "net/http."):
		default:
			t.Errorf("waiting_at %q (stack %q), want main.*, net/http.* or connect", r.WaitingAt, r.WaitingStack)
		}
	}
	t.Logf("%d reports: %d dials waiting in connect (the target's %d), %d with the budget of net.Dialer's Timeout (the target's %d), %d outerShort waiting on a child",
		len(run.reports), dials, run.target.Dial, dialerBudget, run.target.DialerTimeout, outer)
	if dials != run.target.Dial || outer != 3 || dialerBudget != run.target.DialerTimeout || dialerBudget == 0 {
		t.Errorf("%d dials waiting in connect, want %d; %d with net.Dialer's Timeout as their budget, want %d; %d outerShort reports waiting on its child, want 3",
			dials, run.target.Dial, dialerBudget, run.target.DialerTimeout, outer)
	}
}

// TestTraceBadTargets: a non-Go process, a missing one, a bad flag: one line.
func TestTraceBadTargets(t *testing.T) {
	tracer := testprog.Tracer(t)
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleep.Process.Kill()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no pid", []string{"trace"}, "--pid is required"},
		{"missing pid", []string{"trace", "--pid", fmt.Sprint(freePID(t))}, "does not exist"},
		{"bad detail", []string{"trace", "--pid", "1", "--detail", "sometimes"}, "unknown --detail \"sometimes\": use auto, always or never"},
	}
	if testenv.Privileged() {
		cases = append(cases, struct {
			name string
			args []string
			want string
		}{"not go", []string{"trace", "--pid", fmt.Sprint(sleep.Process.Pid)}, "not a Go executable"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkOneLineError(t, exec.Command(tracer, tc.args...), tc.want) })
	}
}
