package main

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"
)

// parseTraceparent reads a W3C traceparent of version 00,
// "00-<32 hex trace ID>-<16 hex parent ID>-<2 hex flags>", by hand so that
// a server without OTel can still log the trace a request belongs to. All-
// zero IDs are invalid, as the W3C spec says.
func parseTraceparent(s string) (traceID, parentID string, err error) {
	const length = 2 + 1 + 32 + 1 + 16 + 1 + 2
	if len(s) != length || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return "", "", fmt.Errorf("traceparent %q: not 00-<32 hex>-<16 hex>-<2 hex>", s)
	}
	version, traceID, parentID, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	if version != "00" {
		return "", "", fmt.Errorf("traceparent %q: version %s, want 00", s, version)
	}
	for _, f := range []string{traceID, parentID, flags} {
		if !isLowerHex(f) {
			return "", "", fmt.Errorf("traceparent %q: %q is not lower-case hex", s, f)
		}
	}
	if isZeros(traceID) || isZeros(parentID) {
		return "", "", fmt.Errorf("traceparent %q: all-zero ID", s)
	}
	return traceID, parentID, nil
}

// requestTrace is the trace and span of an inbound request: the span in ctx
// (the server span otelhttp or otelgrpc started), else the trace ID of the
// traceparent header, else nothing.
func requestTrace(ctx context.Context, traceparent string) (traceID, spanID string) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String(), sc.SpanID().String()
	}
	if traceparent == "" {
		return "", ""
	}
	traceID, _, err := parseTraceparent(traceparent)
	if err != nil {
		return "", ""
	}
	return traceID, ""
}

func isLowerHex(s string) bool {
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func isZeros(s string) bool {
	for i := range len(s) {
		if s[i] != '0' {
			return false
		}
	}
	return true
}
