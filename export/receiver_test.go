package export

import (
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// receiver is an in-process OTLP trace receiver on loopback: the real
// OTLP gRPC service (TraceServiceServer) or the OTLP/HTTP protobuf
// endpoint (POST /v1/traces). It can be stopped and started again on the
// same port, to play an endpoint that goes down and comes back.
type receiver struct {
	proto string
	addr  string // host:port, fixed at the first start

	mu      sync.Mutex
	reqs    int
	bytes   int
	spans   []receivedSpan
	grpcSrv *grpc.Server
	httpSrv *http.Server
}

// receivedSpan is a span with the resource it came with.
type receivedSpan struct {
	span     *tracepb.Span
	resource map[string]any
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *receiver
}

// Export stores the request.
func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.r.store(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func newReceiver(t testing.TB, protocol string) *receiver {
	t.Helper()
	r := &receiver{proto: protocol}
	r.start(t)
	t.Cleanup(r.stop)
	return r
}

// endpoint is what OTLPConfig.Endpoint takes.
func (r *receiver) endpoint() string {
	if r.proto == ProtocolGRPC {
		return r.addr
	}
	return "http://" + r.addr + "/v1/traces"
}

func (r *receiver) start(t testing.TB) {
	t.Helper()
	addr := r.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	// The port of a stopped receiver is free again at once (Go sets
	// SO_REUSEADDR); retry briefly all the same.
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	r.addr = ln.Addr().String()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proto == ProtocolGRPC {
		srv := grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(srv, traceService{r: r})
		r.grpcSrv = srv
		go srv.Serve(ln)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serveHTTP)
	r.httpSrv = &http.Server{Handler: mux}
	go r.httpSrv.Serve(ln)
}

func (r *receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var m coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.store(&m)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// stop closes the receiver and its connections, as a crashed collector.
func (r *receiver) stop() {
	r.mu.Lock()
	g, h := r.grpcSrv, r.httpSrv
	r.grpcSrv, r.httpSrv = nil, nil
	r.mu.Unlock()
	if g != nil {
		g.Stop()
	}
	if h != nil {
		h.Close()
	}
}

func (r *receiver) store(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs++
	r.bytes += proto.Size(req)
	for _, rs := range req.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans = append(r.spans, receivedSpan{span: sp, resource: res})
			}
		}
	}
}

// received returns a copy of the spans so far.
func (r *receiver) received() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.spans...)
}

func (r *receiver) counts() (spans, bytes, reqs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.spans), r.bytes, r.reqs
}

// waitSpans waits until at least n spans arrived.
func (r *receiver) waitSpans(t testing.TB, n int, timeout time.Duration) []receivedSpan {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := r.received()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans received in %v, want %d", len(got), timeout, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// anyValue turns an OTLP attribute value into a Go value: string, int64,
// float64 or bool.
func anyValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	}
	return v.String()
}

// attrs turns OTLP attributes into a map.
func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = anyValue(kv.Value)
	}
	return m
}
