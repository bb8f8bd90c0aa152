package export

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/workload"
)

var (
	created   = time.Date(2026, 11, 29, 17, 31, 1, 0, time.UTC)
	createdMo = uint64(3_601_000_000_000)
)

// at is a time ms after the sample deadline's creation, wall and mono.
func at(ms float64) (time.Time, uint64) {
	d := time.Duration(ms * float64(time.Millisecond))
	return created.Add(d), createdMo + uint64(d)
}

// sampleReport is a request that timed out on a blackholed connection:
// detail probes on, a trace, two connections (the lossy one first).
func sampleReport() correlate.Report {
	expiry, expiryMono := at(1200.05)
	ev := func(ms float64, kind string, rto int64, backoff uint8) correlate.ConnEvent {
		t, m := at(ms)
		return correlate.ConnEvent{Kind: kind, Mono: m, Time: t, RTOMs: rto, SRTTUs: 81, Backoff: backoff, Retransmits: backoff + 1}
	}
	healthyAt, healthyMono := at(100)
	return correlate.Report{
		Deadline: event.Deadline{
			Time: expiry, Mono: expiryMono, Kind: event.TimerFired, PID: 4242, TID: 4245, Comm: "orders", Goid: 977,
			Ctx: 0xc000120000, Deadline: created.Add(1200 * time.Millisecond), Children: 2,
			TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", TraceSource: "otel_context", TraceSampled: true,
			Detail: true, CreatedMono: createdMo, Created: created, CreatedAt: "main.fetchOrders (/src/orders/main.go:34)",
			CreatedGoid: 51,
		},
		Cause: correlate.Cause{
			Class: correlate.ClassRTO, Confidence: correlate.Exact,
			Summary: "3 RTOs to 10.213.0.2:8080, rto 204→408→816 ms, srtt 0.1 ms",
			Note:    "bound to goroutine 51 of pid 4242",
			Connections: []correlate.Connection{
				{
					Cookie: 0x1001, Local: netip.MustParseAddrPort("10.213.0.1:41544"), Peer: netip.MustParseAddrPort("10.213.0.2:8080"), Direction: "outbound",
					Class: correlate.ClassRTO, Via: "binding:http_roundtrip", Counts: map[string]int{"tlp": 1, "rto": 3},
					SRTTUs: 81, RTOMs: 816, Backoff: 2, State: "ESTABLISHED",
					Events: []correlate.ConnEvent{ev(200, "tlp", 204, 0), ev(404, "rto", 204, 0), ev(812, "rto", 408, 1), ev(1628, "rto", 816, 2)},
				},
				{
					Cookie: 0x1002, Local: netip.MustParseAddrPort("[fd00::1]:41560"), Peer: netip.MustParseAddrPort("[fd00::3]:9090"),
					Class: correlate.ClassSlowPeer, Via: "binding:http_roundtrip", Counts: map[string]int{"established": 1},
					SRTTUs: 95, RTOMs: 204,
					Events: []correlate.ConnEvent{{Kind: "established", Mono: healthyMono, Time: healthyAt, RTOMs: 204, SRTTUs: 95}},
				},
			},
		},
	}
}

// procsWith is a registry holding one attached process: its executable
// and the environment it names its service in.
func procsWith(t testing.TB, pid uint32, exe string, env ...string) *Processes {
	t.Helper()
	ps := NewProcesses(0)
	ps.Add(ProcessOf(workload.Identity{PID: int(pid), Comm: "my (odd) comm", ExeName: filepath.Base(strings.TrimSuffix(exe, " (deleted)")),
		Service: workload.ParseService([]byte(strings.Join(env, "\x00")))}))
	return ps
}

// exportAll sends the reports through a fresh exporter to the receiver and
// closes it.
func exportAll(t *testing.T, protocol string, procs *Processes, reports ...correlate.Report) []receivedSpan {
	t.Helper()
	rcv := newReceiver(t, protocol)
	o, err := NewOTLP(context.Background(), OTLPConfig{Protocol: protocol, Endpoint: rcv.endpoint(), Insecure: true,
		Processes: procs, BatchTimeout: 50 * time.Millisecond, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range reports {
		o.Export(&reports[i])
	}
	got := rcv.waitSpans(t, len(reports), 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s := o.Stats(); s.Exported != uint64(len(reports)) || s.Failed+s.DroppedQueueFull+s.DroppedShutdown != 0 {
		t.Errorf("stats %+v, want %d exported and nothing dropped", s, len(reports))
	}
	return got
}

func hexID(b []byte) string { return hex.EncodeToString(b) }

// The report → span mapping, end to end through the real OTLP exporters
// into a receiver: the span sits in the request's trace under the span
// current at the deadline's creation, runs from creation to expiry, is an
// error, names what expired, carries the cause and one event per TCP
// event at its kernel time; its resource is the traced process's own
// service.
func TestOTLPSpanMapping(t *testing.T) {
	for _, protocol := range Protocols {
		t.Run(protocol, func(t *testing.T) {
			rep := sampleReport()
			ps := procsWith(t, rep.Deadline.PID, "/usr/local/bin/orders-svc",
				"PATH=/bin", "OTEL_SERVICE_NAME=orders", "OTEL_RESOURCE_ATTRIBUTES=service.namespace=shop,deployment.environment=lab%20one")
			got := exportAll(t, protocol, ps, rep)
			if len(got) != 1 {
				t.Fatalf("%d spans, want 1", len(got))
			}
			sp, res := got[0].span, got[0].resource
			if id := hexID(sp.TraceId); id != rep.Deadline.TraceID {
				t.Errorf("trace ID %s, want the request's %s", id, rep.Deadline.TraceID)
			}
			if id := hexID(sp.ParentSpanId); id != rep.Deadline.SpanID {
				t.Errorf("parent %s, want the request's span %s", id, rep.Deadline.SpanID)
			}
			if len(sp.SpanId) != 8 || hexID(sp.SpanId) == rep.Deadline.SpanID {
				t.Errorf("span ID %x: want a new one", sp.SpanId)
			}
			if sp.Name != "deadline exceeded: main.fetchOrders" {
				t.Errorf("name %q", sp.Name)
			}
			if s, e := time.Unix(0, int64(sp.StartTimeUnixNano)), time.Unix(0, int64(sp.EndTimeUnixNano)); !s.Equal(created) || !e.Equal(rep.Deadline.Time) {
				t.Errorf("span %v – %v, want creation %v – expiry %v", s.UTC(), e.UTC(), created, rep.Deadline.Time)
			}
			if sp.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || sp.Status.GetMessage() == "" {
				t.Errorf("status %v, want error", sp.Status)
			}
			if sp.Kind != tracepb.Span_SPAN_KIND_INTERNAL {
				t.Errorf("kind %v", sp.Kind)
			}
			want := map[string]any{
				"event.type": "timeout", "timeout.cause": "context_deadline", "timeout.expiry": "timer_fired",
				"timeout.duration_ms": 1200.05, "timeout.budget_ms": 1200.0, "timeout.children": int64(2),
				"timeout.class": "rto", "timeout.confidence": "exact", "timeout.summary": rep.Cause.Summary,
				"timeout.note": rep.Cause.Note, "timeout.trace_source": "otel_context", "timeout.detail": true,
				"timeout.deadline":     "2026-11-29T17:31:02.2Z",
				"network.peer.address": "10.213.0.2", "network.peer.port": int64(8080),
				"server.address": "10.213.0.2", "server.port": int64(8080),
				"network.local.address": "10.213.0.1", "network.local.port": int64(41544), "network.transport": "tcp",
				"tcp.connections": int64(2), "tcp.rto_count": int64(3), "tcp.retransmits": int64(4), "tcp.tlp_count": int64(1),
				"tcp.fast_retransmits": int64(0), "tcp.resets": int64(0), "tcp.srtt_ms": 0.081, "tcp.rto_ms": int64(816),
				"tcp.backoff": int64(2), "tcp.state": "ESTABLISHED", "tcp.socket_cookie": "0x1001",
				"process.pid": int64(4242), "process.executable.name": "orders-svc",
				"code.function": "main.fetchOrders", "code.filepath": "/src/orders/main.go", "code.lineno": int64(34),
				"code.function.name": "main.fetchOrders", "code.file.path": "/src/orders/main.go", "code.line.number": int64(34),
				"error.type": "timeout",
			}
			a := attrs(sp.Attributes)
			for k, v := range want {
				if a[k] != v {
					t.Errorf("attribute %s = %v (%T), want %v (%T)", k, a[k], a[k], v, v)
				}
			}
			for _, k := range []string{"container.id", "k8s.pod.uid", "tcp.events_omitted", "timeout.trace_note"} {
				if _, ok := a[k]; ok {
					t.Errorf("attribute %s present, want it absent", k)
				}
			}
			// One event per TCP event of both connections, in time order.
			wantEvents := []struct {
				name string
				ms   float64
				peer string
			}{{"tcp.established", 100, "fd00::3"}, {"tcp.tlp", 200, "10.213.0.2"}, {"tcp.rto", 404, "10.213.0.2"},
				{"tcp.rto", 812, "10.213.0.2"}, {"tcp.rto", 1628, "10.213.0.2"}}
			if len(sp.Events) != len(wantEvents) {
				t.Fatalf("%d events, want %d: %v", len(sp.Events), len(wantEvents), sp.Events)
			}
			for i, w := range wantEvents {
				e := sp.Events[i]
				wt, _ := at(w.ms)
				ea := attrs(e.Attributes)
				if e.Name != w.name || !time.Unix(0, int64(e.TimeUnixNano)).Equal(wt) || ea["network.peer.address"] != w.peer {
					t.Errorf("event %d: %s at %v on %v; want %s at %v on %s", i, e.Name,
						time.Unix(0, int64(e.TimeUnixNano)).UTC(), ea["network.peer.address"], w.name, wt, w.peer)
				}
			}
			if ea := attrs(sp.Events[4].Attributes); ea["tcp.backoff"] != int64(2) || ea["tcp.rto_ms"] != int64(816) {
				t.Errorf("last RTO event attributes %v", ea)
			}
			for i, want := range []any{nil, "tail_loss_probe", "timeout", "timeout", "timeout"} {
				if got := attrs(sp.Events[i].Attributes)["network.tcp.retransmit.type"]; got != want {
					t.Errorf("event %d (%s): network.tcp.retransmit.type %v, want %v", i, sp.Events[i].Name, got, want)
				}
			}
			for k, v := range map[string]any{"service.name": "orders", "service.namespace": "shop",
				"deployment.environment": "lab one", "process.pid": int64(4242), "process.executable.name": "orders-svc"} {
				if res[k] != v {
					t.Errorf("resource %s = %v, want %v", k, res[k], v)
				}
			}
		})
	}
}

// Reports without a parent span: no trace at all gives a root span of a
// new trace; a trace ID alone (no span ID) keeps the trace, as a root span
// in it. A deadline whose creation was not seen gives a short span ending
// at the expiry, the deadline as an attribute, no budget.
func TestOTLPSpanWithoutParent(t *testing.T) {
	base := sampleReport()
	noTrace := base
	noTrace.Deadline.TraceID, noTrace.Deadline.SpanID, noTrace.Deadline.TraceSource = "", "", ""
	noTrace.Deadline.TraceNote = "no span in the context chain"
	noTrace.Deadline.Ctx = 1
	traceOnly := base
	traceOnly.Deadline.SpanID = ""
	traceOnly.Deadline.Ctx = 2
	cold := base
	cold.Deadline.Detail, cold.Deadline.Created, cold.Deadline.CreatedMono, cold.Deadline.CreatedAt = false, time.Time{}, 0, ""
	cold.Deadline.TraceID = "0af7651916cd43dd8448eb211c80319c"
	cold.Deadline.Ctx = 3
	cold.ContainerID, cold.PodUID = "3f9c0e1d2b", "7d3c1a52-55f1-4c1e-9a4b-2f3e1c2d4b5a"

	// No /proc entry: the comm names the service.
	got := exportAll(t, ProtocolGRPC, NewProcesses(0), noTrace, traceOnly, cold)
	byTrace := map[string]receivedSpan{}
	var root receivedSpan
	for _, s := range got {
		id := hexID(s.span.TraceId)
		if id == base.Deadline.TraceID || id == cold.Deadline.TraceID {
			byTrace[id] = s
		} else {
			root = s
		}
		if s.resource["service.name"] != "orders" {
			t.Errorf("service.name %v, want the comm", s.resource["service.name"])
		}
	}
	if root.span == nil || len(root.span.TraceId) != 16 || len(root.span.ParentSpanId) != 0 {
		t.Fatalf("no root span of a new trace: %v", got)
	}
	if a := attrs(root.span.Attributes); a["timeout.trace_note"] != "no span in the context chain" {
		t.Errorf("root span attributes %v", a)
	}
	to, ok := byTrace[base.Deadline.TraceID]
	if !ok || len(to.span.ParentSpanId) != 0 {
		t.Errorf("trace-only report: %v, want a root span in trace %s", to.span, base.Deadline.TraceID)
	}
	c, ok := byTrace[cold.Deadline.TraceID]
	if !ok {
		t.Fatalf("the detail-less report's span is missing")
	}
	start, end := time.Unix(0, int64(c.span.StartTimeUnixNano)), time.Unix(0, int64(c.span.EndTimeUnixNano))
	if !end.Equal(cold.Deadline.Time) || end.Sub(start) != unknownStart {
		t.Errorf("detail-less span %v – %v, want %v ending at the expiry %v", start, end, unknownStart, cold.Deadline.Time)
	}
	a := attrs(c.span.Attributes)
	if c.span.Name != "deadline exceeded" || a["timeout.deadline"] != "2026-11-29T17:31:02.2Z" || a["timeout.detail"] != false {
		t.Errorf("detail-less span %q %v", c.span.Name, a)
	}
	for _, k := range []string{"timeout.budget_ms", "timeout.duration_ms", "code.function"} {
		if _, ok := a[k]; ok {
			t.Errorf("detail-less span has %s", k)
		}
	}
	if a["container.id"] != cold.ContainerID || a["k8s.pod.uid"] != cold.PodUID ||
		c.resource["container.id"] != cold.ContainerID || c.resource["k8s.pod.uid"] != cold.PodUID {
		t.Errorf("container and pod: span %v, resource %v", a, c.resource)
	}
}

// The executable's name is the service when the process sets none; a
// process stays known after it exits; one attached later under the same
// PID replaces it; a process never registered is named by its comm; the
// least recently used goes first past the cap.
func TestProcessesRegistry(t *testing.T) {
	ps := procsWith(t, 7, "/opt/app/billing (deleted)", "HOME=/root")
	if p := ps.Lookup(7, "bill"); p.ServiceName != "billing" || p.Executable != "billing" {
		t.Errorf("%+v, want billing from the exe", p)
	}
	ps.Add(ProcessOf(workload.Identity{PID: 7, ExeName: "x", Service: workload.ParseService([]byte("OTEL_RESOURCE_ATTRIBUTES=service.name=ledger,bad,=x\x00"))}))
	if p := ps.Lookup(7, "x"); p.ServiceName != "ledger" || p.Executable != "x" || len(p.Attributes) != 0 {
		t.Errorf("reused PID: %+v, want ledger from OTEL_RESOURCE_ATTRIBUTES", p)
	}
	if p := NewProcesses(0).Lookup(9, ""); p.ServiceName != "unknown_service" {
		t.Errorf("nothing known: %+v", p)
	}
	if p := NewProcesses(0).Lookup(9, "curl"); p.ServiceName != "curl" || p.Executable != "curl" {
		t.Errorf("never registered: %+v", p)
	}
	small := NewProcesses(2)
	for pid := uint32(1); pid <= 2; pid++ {
		small.Add(Process{PID: pid, Executable: fmt.Sprint("p", pid)})
	}
	small.Lookup(1, "")                          // 2 is now the least recently used
	small.Add(Process{PID: 3, Executable: "p3"}) // evicts 2
	if p := small.Lookup(2, "gone"); p.Executable != "gone" {
		t.Errorf("the least recently used was kept: %+v", p)
	}
	if p := small.Lookup(1, ""); p.Executable != "p1" {
		t.Errorf("a recently used one was evicted: %+v", p)
	}
}

func TestOTLPConfig(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	if c, err := (OTLPConfig{}).withDefaults(); err != nil || c.Protocol != ProtocolGRPC {
		t.Errorf("protocol from OTEL_EXPORTER_OTLP_PROTOCOL: %q %v", c.Protocol, err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
	if c, _ := (OTLPConfig{}).withDefaults(); c.Protocol != ProtocolHTTPProtobuf {
		t.Errorf("the traces variable wins: %q", c.Protocol)
	}
	if c, _ := (OTLPConfig{Protocol: "grpc"}).withDefaults(); c.Protocol != ProtocolGRPC {
		t.Errorf("the field wins: %q", c.Protocol)
	}
	if _, err := (OTLPConfig{Protocol: "http/json"}).withDefaults(); err == nil {
		t.Error("http/json accepted")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")
	if c, _ := (OTLPConfig{}).withDefaults(); c.ExportTimeout != 2500*time.Millisecond {
		t.Errorf("export timeout from OTEL_EXPORTER_OTLP_TIMEOUT: %v", c.ExportTimeout)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")
	if _, err := (OTLPConfig{}).withDefaults(); err == nil {
		t.Error("a malformed OTEL_EXPORTER_OTLP_TIMEOUT accepted")
	}
}

// server.* name an upstream only: never a server's caller, nor a
// connection whose handshake was not seen.
func TestServerAddressOnlyForOutbound(t *testing.T) {
	for dir, want := range map[string]bool{"outbound": true, "inbound": false, "": false} {
		c := correlate.Connection{Peer: netip.MustParseAddrPort("10.0.0.9:50123"), Direction: dir}
		got := false
		for _, kv := range peerAttrs(&c) {
			if kv.Key == attrServerAddr {
				got = true
			}
		}
		if got != want {
			t.Errorf("direction %q: server.address set %v, want %v", dir, got, want)
		}
	}
}
