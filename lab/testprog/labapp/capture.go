package main

import (
	"context"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/stats"
)

// callSpan receives the span context of the client span that otelhttp or
// otelgrpc starts inside a call, which the caller's own context never sees.
type callSpan struct {
	mu sync.Mutex
	sc trace.SpanContext
}

type callSpanKey struct{}

// withCallSpan returns ctx carrying a fresh callSpan for one call.
func withCallSpan(ctx context.Context) (context.Context, *callSpan) {
	c := &callSpan{}
	return context.WithValue(ctx, callSpanKey{}, c), c
}

// spanContext is what was recorded, or an invalid SpanContext.
func (c *callSpan) spanContext() trace.SpanContext {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sc
}

// recordCallSpan stores the span current in ctx into the callSpan ctx
// carries, if any.
func recordCallSpan(ctx context.Context) {
	c, ok := ctx.Value(callSpanKey{}).(*callSpan)
	if !ok {
		return
	}
	sc := trace.SpanContextFromContext(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sc = sc
}

// captureTransport sits under otelhttp.NewTransport, where the request's
// context holds the client span otelhttp started.
type captureTransport struct {
	next http.RoundTripper
}

// RoundTrip records the client span and passes the request on.
func (t captureTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	recordCallSpan(r.Context())
	return t.next.RoundTrip(r)
}

// captureHandler is a gRPC stats handler registered after otelgrpc's:
// handlers tag an RPC in order, so its TagRPC sees the client span
// otelgrpc started. (A unary interceptor would not: interceptors run before
// the stats handlers.)
type captureHandler struct{}

// TagRPC records the client span.
func (captureHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	recordCallSpan(ctx)
	return ctx
}

// HandleRPC does nothing.
func (captureHandler) HandleRPC(context.Context, stats.RPCStats) {}

// TagConn does nothing.
func (captureHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

// HandleConn does nothing.
func (captureHandler) HandleConn(context.Context, stats.ConnStats) {}
