package export

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	metricName = regexp.MustCompile(`timeout_tracer_[a-z_]+`)
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
)

// registeredNames are the metric names the tracer registers, whether or
// not they have a series yet.
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	m := NewMetrics(MetricsConfig{Processes: NewProcesses(0)})
	ch := make(chan *prometheus.Desc, 256)
	go func() {
		m.Registry().Describe(ch)
		close(ch)
	}()
	names := map[string]bool{}
	for d := range ch {
		if sm := descName.FindStringSubmatch(d.String()); sm != nil {
			names[sm[1]] = true
		}
	}
	return names
}

// queries returns every string of the dashboard under a key that holds
// PromQL: panel targets' expr, template variables' query and definition.
func queries(v any, key string, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			queries(val, k, out)
		}
	case []any:
		for _, val := range x {
			queries(val, key, out)
		}
	case string:
		if key == "expr" || key == "query" || key == "definition" {
			*out = append(*out, x)
		}
	}
}

// Every metric the dashboard queries is one the tracer registers (a
// histogram's _bucket, _sum and _count series included), and the panels
// the dashboard promises are there.
func TestDashboardQueriesUseRegisteredMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "timeout-tracer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	registered := registeredNames(t)
	if len(registered) < 10 || !registered["timeout_tracer_context_endings_total"] {
		t.Fatalf("implausible registry: %v", registered)
	}
	var qs []string
	queries(dash, "", &qs)
	used := map[string]bool{}
	for _, q := range qs {
		for _, name := range metricName.FindAllString(q, -1) {
			used[name] = true
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if s, ok := strings.CutSuffix(name, suffix); ok && registered[s] {
					base = s
				}
			}
			if !registered[base] {
				t.Errorf("the dashboard queries %s, which the tracer does not register (query %q)", name, q)
			}
		}
	}
	for _, want := range []string{
		"timeout_tracer_context_endings_total",                  // timeouts by service and cause
		"timeout_tracer_tcp_retransmits_total",                  // top peers by RTO
		"timeout_tracer_deadline_budget_seconds_bucket",         // budget heatmap
		"timeout_tracer_call_deadline_remaining_seconds_bucket", // remaining-deadline heatmap
		"timeout_tracer_ringbuffer_lost_events_total",           // agent health
		"timeout_tracer_otlp_spans_dropped_total",
		"timeout_tracer_attached_processes",
	} {
		if !used[want] {
			t.Errorf("the dashboard never queries %s", want)
		}
	}
	var titles []string
	for _, p := range dash["panels"].([]any) {
		titles = append(titles, p.(map[string]any)["title"].(string))
	}
	for _, want := range []string{"Timeouts by service and cause", "Top peers by RTO", "Budget of the contexts that expired", "Lost events"} {
		if !slices.Contains(titles, want) {
			t.Errorf("no panel %q in %q", want, titles)
		}
	}
}
