package export

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"

	"github.com/timeout-tracer/tracer/correlate"
)

func localReport() correlate.Report {
	rep := sampleReport()
	thr, rq := 180.5, 0.0
	rep.Cause.Class = correlate.ClassCPUThrottled
	rep.Cause.Local = &correlate.LocalTime{ThrottledMs: &thr, RunqueueMs: &rq, WindowMs: 300}
	return rep
}

// The local figures become span attributes; a source that was not
// watching (GC here) leaves its attribute out rather than saying 0.
func TestSpanCarriesLocalFigures(t *testing.T) {
	rep := localReport()
	sp := planSpan(&rep, Process{Executable: "orders"})
	got := map[attribute.Key]attribute.Value{}
	for _, a := range sp.attrs {
		got[a.Key] = a.Value
	}
	if v, ok := got[attrLocalThrottled]; !ok || v.AsFloat64() != 180.5 {
		t.Errorf("%s = %v, want 180.5", attrLocalThrottled, v)
	}
	if v, ok := got[attrLocalRunqueue]; !ok || v.AsFloat64() != 0 {
		t.Errorf("%s = %v, want 0", attrLocalRunqueue, v)
	}
	if _, ok := got[attrLocalGCPause]; ok {
		t.Errorf("%s present for a source that was not watching", attrLocalGCPause)
	}
	if got[attrClass].AsString() != "cpu_throttled" {
		t.Errorf("class %v", got[attrClass])
	}
	plain := sampleReport()
	for _, a := range planSpan(&plain, Process{}).attrs {
		if strings.HasPrefix(string(a.Key), "timeout.local.") {
			t.Errorf("%s on a report without local figures", a.Key)
		}
	}
}

func TestMetricsCountLocalTime(t *testing.T) {
	m := NewMetrics(MetricsConfig{Processes: NewProcesses(0)})
	rep := localReport()
	m.Export(&rep)
	if n := testutil.CollectAndCount(m.localLost); n != 2 {
		t.Errorf("%d local series, want 2 (throttled, runqueue; no gc_pause)", n)
	}
	if v := testutil.ToFloat64(m.endings.WithLabelValues(serviceOf(t, m, &rep), "", "deadline_exceeded", "cpu_throttled")); v != 1 {
		t.Errorf("endings with cause cpu_throttled = %v, want 1", v)
	}
}

func serviceOf(t *testing.T, m *Metrics, r *correlate.Report) string {
	t.Helper()
	svc, _ := m.who(r.Deadline.PID, r.Deadline.Comm)
	return svc
}

func TestTableShowsLocalFigures(t *testing.T) {
	var buf bytes.Buffer
	rep := localReport()
	if err := NewTimeoutWriter(&buf, FormatTable).WriteReport(&rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "local: throttled 180.5ms  runqueue 0.0ms  gc_pause -") {
		t.Errorf("table:\n%s", buf.String())
	}
}

// The answer the process held becomes span attributes: what held it and
// its figures; a report without one has none.
func TestSpanCarriesHeldAnswer(t *testing.T) {
	attrs := func(rep correlate.Report) map[attribute.Key]attribute.Value {
		got := map[attribute.Key]attribute.Value{}
		for _, a := range planSpan(&rep, Process{}).attrs {
			got[a.Key] = a.Value
		}
		return got
	}
	rep := sampleReport()
	rep.Cause.Class = correlate.ClassLocal
	rep.Cause.Unread = &correlate.Unread{Peer: "10.0.0.3:80", Bytes: 176, ForMs: 44, SentAgoMs: 52}
	got := attrs(rep)
	if got[attrAnswerHeld].AsString() != "unread" || got[attrAnswerBytes].AsInt64() != 176 || got[attrAnswerUnreadMs].AsFloat64() != 44 {
		t.Errorf("unread answer: %v %v %v", got[attrAnswerHeld], got[attrAnswerBytes], got[attrAnswerUnreadMs])
	}
	rep.Cause.Unread, rep.Cause.Delivered = nil, &correlate.Delivered{Peer: "10.0.0.3:80", Goid: 7, Frame: "http.(*persistConn).roundTrip", PeerMs: 8}
	got = attrs(rep)
	if got[attrAnswerHeld].AsString() != "delivered" || got[attrAnswerPeerMs].AsFloat64() != 8 {
		t.Errorf("delivered answer: %v %v", got[attrAnswerHeld], got[attrAnswerPeerMs])
	}
	for k := range attrs(sampleReport()) {
		if strings.HasPrefix(string(k), "timeout.answer.") {
			t.Errorf("%s on a report without a held answer", k)
		}
	}
}
