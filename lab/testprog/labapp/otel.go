package main

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// telemetry is the OTel setup of one process: an SDK tracer provider that
// samples every span and has no span processor, so spans are recorded in
// memory and exported nowhere, and the W3C TraceContext propagator, so
// traceparent headers and metadata are sent and read.
type telemetry struct {
	provider   *sdktrace.TracerProvider
	propagator propagation.TextMapPropagator
}

// newTelemetry sets OTel up. It also installs the provider and propagator
// as the OTel globals, as instrumented applications usually do, so that any
// library reaching for the globals traces the same way; labapp itself hands
// them to otelhttp and otelgrpc explicitly.
func newTelemetry() *telemetry {
	t := &telemetry{
		provider:   sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())),
		propagator: propagation.TraceContext{},
	}
	otel.SetTracerProvider(t.provider)
	otel.SetTextMapPropagator(t.propagator)
	return t
}

// tracer is the tracer for spans labapp starts itself.
func (t *telemetry) tracer() trace.Tracer {
	return t.provider.Tracer("github.com/timeout-tracer/tracer/lab/testprog/labapp")
}

// shutdown ends the tracer provider.
func (t *telemetry) shutdown(ctx context.Context) error {
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("shut down tracer provider: %w", err)
	}
	return nil
}
