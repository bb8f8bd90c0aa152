package export

import (
	"context"

	"github.com/timeout-tracer/tracer/correlate"
)

// Exporter sends correlated reports somewhere other than the terminal:
// OTLP spans, Prometheus metrics. tracer trace feeds one pipeline's reports
// to it, the node agent every pipeline's; so Export is safe for concurrent
// use.
type Exporter interface {
	// Export must never block the pipeline: what cannot be handled in
	// time is dropped and counted. r is not modified; an exporter may keep
	// it (its slices included) after Export returns, as the correlator's
	// reports allow.
	Export(r *correlate.Report)
	// Close flushes what is queued until ctx ends, drops (and counts) the
	// rest, and releases everything.
	Close(ctx context.Context) error
}

var (
	_ Exporter = (*OTLP)(nil)
	_ Exporter = (*Metrics)(nil)
)
