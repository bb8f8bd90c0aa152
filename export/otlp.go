package export

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/timeout-tracer/tracer/correlate"
)

// The OTLP protocols.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// Protocols lists the accepted values of OTLPConfig.Protocol.
var Protocols = []string{ProtocolGRPC, ProtocolHTTPProtobuf}

// OTLPConfig configures the OTLP trace exporter. Zero fields take their
// defaults. Endpoint, headers, TLS, compression and timeout also come from
// the standard OTEL_EXPORTER_OTLP_* and OTEL_EXPORTER_OTLP_TRACES_*
// variables (read by the OpenTelemetry exporters themselves); the fields
// here override them.
type OTLPConfig struct {
	// Protocol is grpc or http/protobuf. "" reads
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, then OTEL_EXPORTER_OTLP_PROTOCOL,
	// else http/protobuf (the specification's default).
	Protocol string
	// Endpoint is host:port or a URL (http://host:4318/v1/traces). ""
	// reads the environment, else localhost:4317 (grpc) or localhost:4318.
	Endpoint string
	// Insecure sends in plaintext, without TLS (an http:// endpoint URL
	// or OTEL_EXPORTER_OTLP_INSECURE=true says so too).
	Insecure bool
	// QueueSize bounds the reports waiting to become spans (default 512)
	// and MaxQueueSize the spans waiting for export (default 1024): when
	// both are full, reports are dropped and counted, never waited for.
	// Timeouts are rare even in a storm (a few hundred a second), and a
	// span with its TCP events takes ~5 KiB queued and ~20 KiB while its
	// batch is encoded: the defaults bound the exporter to ~20 MiB.
	QueueSize    int
	MaxQueueSize int
	// BatchSize is the most spans in one export (default 256), sent at
	// least every BatchTimeout (default 1s).
	BatchSize    int
	BatchTimeout time.Duration
	// ExportTimeout bounds one export, retries included: a batch that
	// cannot be sent within it is dropped (counted). Default:
	// OTEL_EXPORTER_OTLP_TRACES_TIMEOUT or OTEL_EXPORTER_OTLP_TIMEOUT
	// (milliseconds), else 10 s. Retries back off from 500 ms to 5 s.
	ExportTimeout time.Duration
	// MaxProcesses bounds the processes with a TracerProvider (a resource)
	// of their own (default 256; the least recently used is dropped).
	MaxProcesses int
	// Processes resolves service names; nil makes one on /proc.
	Processes *Processes
	// Version is the tracer's, for the instrumentation scope.
	Version string
	Logger  *slog.Logger
	// Exporter, when set, replaces the OTLP client (tests, benchmarks);
	// Protocol and Endpoint are then ignored.
	Exporter sdktrace.SpanExporter
}

func (c OTLPConfig) withDefaults() (OTLPConfig, error) {
	if c.Protocol == "" {
		c.Protocol = firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if c.Protocol == "" {
		c.Protocol = ProtocolHTTPProtobuf
	}
	if c.Exporter == nil && c.Protocol != ProtocolGRPC && c.Protocol != ProtocolHTTPProtobuf {
		return c, fmt.Errorf("unknown OTLP protocol %q: use grpc or http/protobuf", c.Protocol)
	}
	for _, d := range []struct {
		v   *int
		def int
	}{{&c.QueueSize, 512}, {&c.MaxQueueSize, 1024}, {&c.BatchSize, 256}, {&c.MaxProcesses, 256}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	c.BatchSize = min(c.BatchSize, c.MaxQueueSize)
	if c.BatchTimeout <= 0 {
		c.BatchTimeout = time.Second
	}
	if c.ExportTimeout <= 0 {
		c.ExportTimeout = 10 * time.Second
		if v := firstEnv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"); v != "" {
			ms, err := strconv.Atoi(v)
			if err != nil || ms <= 0 {
				return c, fmt.Errorf("OTEL_EXPORTER_OTLP_TIMEOUT %q: want milliseconds", v)
			}
			c.ExportTimeout = time.Duration(ms) * time.Millisecond
		}
	}
	if c.Processes == nil {
		c.Processes = NewProcesses(0)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// OTLPStats count what happened to the reports given to an OTLP exporter.
// Reports = Exported + Failed + Dropped* + what is still queued.
type OTLPStats struct {
	Reports          uint64 // given to Export
	Exported         uint64 // spans the endpoint accepted
	Failed           uint64 // spans whose export failed after its retries
	DroppedQueueFull uint64 // reports dropped because both queues were full
	DroppedShutdown  uint64 // reports and spans still queued when Close's time ran out
	Queued           int    // reports and spans waiting now
}

// OTLP exports each report as one span inside the request's own trace.
// Export never blocks: a report that does not fit in the bounded queues is
// dropped and counted, so an endpoint that is down costs memory up to the
// queues' bounds and nothing else. Safe for concurrent use.
type OTLP struct {
	cfg   OTLPConfig
	log   *slog.Logger
	queue chan correlate.Report
	// tokens holds one token per span inside the batch processor (queued
	// or being exported); its capacity is the processor's queue size, so
	// the processor never drops a span on its own (silently), and the
	// worker waits for room instead.
	tokens chan struct{}
	bsp    sdktrace.SpanProcessor
	exp    *countingExporter

	mu        sync.RWMutex // Export's read lock against Close
	closed    bool
	stop      chan struct{} // Close: drain the queue, then exit
	abort     chan struct{} // Close's time ran out: exit now
	done      chan struct{} // the worker exited
	closeOnce sync.Once
	closeErr  error

	providers *providerCache
	reports   atomic.Uint64
	dropped   atomic.Uint64
	shutdown  atomic.Uint64
}

// NewOTLP starts an exporter. It does not connect: an endpoint that is
// down shows as failed exports, never as an error here.
func NewOTLP(ctx context.Context, cfg OTLPConfig) (*OTLP, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	next := cfg.Exporter
	if next == nil {
		if next, err = newOTLPClient(ctx, cfg); err != nil {
			return nil, err
		}
	}
	o := &OTLP{
		cfg:    cfg,
		log:    cfg.Logger,
		queue:  make(chan correlate.Report, cfg.QueueSize),
		tokens: make(chan struct{}, cfg.MaxQueueSize),
		stop:   make(chan struct{}),
		abort:  make(chan struct{}),
		done:   make(chan struct{}),
	}
	o.exp = &countingExporter{next: next, tokens: o.tokens, log: cfg.Logger}
	o.bsp = sdktrace.NewBatchSpanProcessor(o.exp,
		sdktrace.WithMaxQueueSize(cfg.MaxQueueSize),
		sdktrace.WithMaxExportBatchSize(cfg.BatchSize),
		sdktrace.WithBatchTimeout(cfg.BatchTimeout),
		sdktrace.WithExportTimeout(cfg.ExportTimeout))
	o.providers = newProviderCache(cfg.MaxProcesses, sharedProcessor{o.bsp}, cfg.Version)
	go o.run()
	return o, nil
}

// newOTLPClient makes the OTLP exporter of the protocol. Retries back off
// quickly and the gRPC connection re-dials at least every 5 s, so that
// export resumes soon after an endpoint comes back.
func newOTLPClient(ctx context.Context, cfg OTLPConfig) (sdktrace.SpanExporter, error) {
	switch cfg.Protocol {
	case ProtocolGRPC:
		opts := []otlptracegrpc.Option{
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: true, InitialInterval: 500 * time.Millisecond,
				MaxInterval: 5 * time.Second, MaxElapsedTime: cfg.ExportTimeout}),
			otlptracegrpc.WithTimeout(cfg.ExportTimeout),
			otlptracegrpc.WithDialOption(grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 500 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
				MinConnectTimeout: 5 * time.Second,
			})),
		}
		if cfg.Endpoint != "" {
			if strings.Contains(cfg.Endpoint, "://") {
				opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
			} else {
				opts = append(opts, otlptracegrpc.WithEndpoint(cfg.Endpoint))
			}
		}
		if cfg.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("create the OTLP gRPC exporter: %w", err)
		}
		return exp, nil
	default:
		opts := []otlptracehttp.Option{
			otlptracehttp.WithEncoding(otlptracehttp.EncodingProtobuf),
			otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: 500 * time.Millisecond,
				MaxInterval: 5 * time.Second, MaxElapsedTime: cfg.ExportTimeout}),
			otlptracehttp.WithTimeout(cfg.ExportTimeout),
		}
		if cfg.Endpoint != "" {
			if strings.Contains(cfg.Endpoint, "://") {
				opts = append(opts, otlptracehttp.WithEndpointURL(cfg.Endpoint))
			} else {
				opts = append(opts, otlptracehttp.WithEndpoint(cfg.Endpoint))
			}
		}
		if cfg.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("create the OTLP HTTP exporter: %w", err)
		}
		return exp, nil
	}
}

// Protocol is the protocol in use.
func (o *OTLP) Protocol() string { return o.cfg.Protocol }

// Export queues the report; it never blocks. The report is copied (its
// slices are shared, not modified).
func (o *OTLP) Export(r *correlate.Report) {
	o.reports.Add(1)
	o.mu.RLock()
	defer o.mu.RUnlock()
	if o.closed {
		o.shutdown.Add(1)
		return
	}
	select {
	case o.queue <- *r:
	default:
		o.dropped.Add(1)
	}
}

// Stats returns the counters.
func (o *OTLP) Stats() OTLPStats {
	exported, failed, lost := o.exp.counts()
	return OTLPStats{
		Reports: o.reports.Load(), Exported: exported, Failed: failed,
		DroppedQueueFull: o.dropped.Load(), DroppedShutdown: o.shutdown.Load() + lost,
		Queued: len(o.queue) + len(o.tokens),
	}
}

// Close exports what is queued until ctx ends, then drops the rest
// (counted in DroppedShutdown) and shuts the exporter down. Reports given
// to Export afterwards are dropped. It returns once everything is released,
// or when ctx ends.
func (o *OTLP) Close(ctx context.Context) error {
	o.closeOnce.Do(func() {
		o.mu.Lock()
		o.closed = true
		o.mu.Unlock()
		close(o.stop)
		select {
		case <-o.done:
		case <-ctx.Done():
			close(o.abort)
			<-o.done // the worker only waits on abortable channels
		}
		err := o.bsp.Shutdown(ctx)
		// What the processor still holds was never exported: count it,
		// and ignore the outcome of exports that finish later.
		o.exp.finish()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			o.closeErr = fmt.Errorf("shut down the OTLP exporter: %w", err)
		}
		o.providers.shutdown()
	})
	return o.closeErr
}

// run turns queued reports into spans until Close.
func (o *OTLP) run() {
	defer close(o.done)
	for {
		select {
		case r := <-o.queue:
			if !o.emit(&r) {
				o.drainAborted()
				return
			}
		case <-o.stop:
			for {
				select {
				case r := <-o.queue:
					if !o.emit(&r) {
						o.drainAborted()
						return
					}
				default:
					return
				}
			}
		}
	}
}

// drainAborted counts what Close had no time for.
func (o *OTLP) drainAborted() {
	for {
		select {
		case <-o.queue:
			o.shutdown.Add(1)
		default:
			return
		}
	}
}

// emit makes the report's span and ends it into the batch processor,
// first waiting for room there. It returns false when Close aborted the
// wait (the report is counted as dropped at shutdown).
func (o *OTLP) emit(r *correlate.Report) bool {
	select {
	case o.tokens <- struct{}{}:
	case <-o.abort:
		o.shutdown.Add(1)
		return false
	}
	proc := o.cfg.Processes.Lookup(r.Deadline.PID, r.Deadline.Comm)
	if r.ContainerID != "" {
		proc.ContainerID = r.ContainerID
	}
	if r.PodUID != "" {
		proc.PodUID = r.PodUID
	}
	if r.PodName != "" {
		proc.PodName, proc.PodNamespace = r.PodName, r.PodNamespace
	}
	plan := planSpan(r, proc)
	tracer := o.providers.tracer(proc)
	ctx := context.Background()
	switch {
	case plan.hasParent:
		flags := trace.TraceFlags(0).WithSampled(true)
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: plan.traceID, SpanID: plan.parent, TraceFlags: flags, Remote: true}))
	case plan.hasTrace:
		ctx = context.WithValue(ctx, forcedTraceKey{}, plan.traceID)
	}
	_, span := tracer.Start(ctx, plan.name, trace.WithTimestamp(plan.start), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(plan.attrs...))
	for _, e := range plan.events {
		span.AddEvent(e.name, trace.WithTimestamp(e.at), trace.WithAttributes(e.attrs...))
	}
	span.SetStatus(codes.Error, plan.status)
	if !span.SpanContext().IsSampled() {
		<-o.tokens // never reaches the processor
	}
	span.End(trace.WithTimestamp(plan.end))
	return true
}

// forcedTraceKey carries the trace ID of a report that has no parent span
// to idGenerator.
type forcedTraceKey struct{}

// idGenerator makes random IDs, except that a span without a parent gets
// the report's trace ID when it has one (a trace ID without a span ID).
// math/rand/v2's global source is safe for concurrent use and randomly
// seeded; IDs need to be unique, not secret.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	if forced, ok := ctx.Value(forcedTraceKey{}).(trace.TraceID); ok && forced.IsValid() {
		tid = forced
	}
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, newSpanID()
}

func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

// sharedProcessor lets every process's TracerProvider end its spans into
// the one batch processor; shutting a provider down (evicting it) must
// not shut the processor.
type sharedProcessor struct{ sdktrace.SpanProcessor }

func (sharedProcessor) Shutdown(context.Context) error   { return nil }
func (sharedProcessor) ForceFlush(context.Context) error { return nil }

// providerCache holds one TracerProvider per process identity: its
// resource. Bounded; the least recently used is shut down (which only
// drops it: the processor is shared).
type providerCache struct {
	mu      sync.Mutex
	max     int
	sp      sdktrace.SpanProcessor
	version string
	ids     sdktrace.IDGenerator
	tick    uint64
	byKey   map[string]*providerEntry
}

type providerEntry struct {
	tp       *sdktrace.TracerProvider
	tracer   trace.Tracer
	lastUsed uint64
}

func newProviderCache(max int, sp sdktrace.SpanProcessor, version string) *providerCache {
	return &providerCache{max: max, sp: sp, version: version, byKey: make(map[string]*providerEntry), ids: idGenerator{}}
}

func (c *providerCache) tracer(p Process) trace.Tracer {
	k := p.key()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	if e, ok := c.byKey[k]; ok {
		e.lastUsed = c.tick
		return e.tracer
	}
	if len(c.byKey) >= c.max {
		var oldest string
		for key, e := range c.byKey {
			if oldest == "" || e.lastUsed < c.byKey[oldest].lastUsed {
				oldest = key
			}
		}
		_ = c.byKey[oldest].tp.Shutdown(context.Background())
		delete(c.byKey, oldest)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(processResource(p)),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithIDGenerator(c.ids),
		sdktrace.WithSpanProcessor(c.sp),
	)
	e := &providerEntry{tp: tp, lastUsed: c.tick,
		tracer: tp.Tracer("github.com/timeout-tracer/tracer", trace.WithInstrumentationVersion(c.version))}
	c.byKey[k] = e
	return e.tracer
}

func (c *providerCache) shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.byKey {
		_ = e.tp.Shutdown(context.Background())
		delete(c.byKey, k)
	}
}

// processResource is the resource of a traced process's spans: its own
// service name and resource attributes, its pid and executable, and its
// container and pod when known. (The SDK merges the tracer's own
// OTEL_RESOURCE_ATTRIBUTES beneath it.)
func processResource(p Process) *resource.Resource {
	attrs := make([]attribute.KeyValue, 0, len(p.Attributes)+5)
	for k, v := range p.Attributes {
		attrs = append(attrs, attribute.String(k, v))
	}
	attrs = append(attrs,
		attribute.String("service.name", p.ServiceName),
		attribute.Int64(attrPID, int64(p.PID)),
		attribute.String(attrExecutable, p.Executable),
	)
	if p.ContainerID != "" {
		attrs = append(attrs, attribute.String(attrContainerID, p.ContainerID))
	}
	if p.PodUID != "" {
		attrs = append(attrs, attribute.String(attrPodUID, p.PodUID))
	}
	if p.PodName != "" {
		attrs = append(attrs, attribute.String(attrPodName, p.PodName))
	}
	if p.PodNamespace != "" {
		attrs = append(attrs, attribute.String(attrNamespace, p.PodNamespace))
	}
	return resource.NewSchemaless(attrs...)
}

// countingExporter counts what the batch processor exports, releases the
// processor's tokens, and keeps failures out of OpenTelemetry's global
// error handler (which would print each one): they are counted, and
// logged at most every logEvery.
type countingExporter struct {
	next   sdktrace.SpanExporter
	tokens chan struct{}
	log    *slog.Logger

	mu                 sync.Mutex
	exported, failed   uint64
	lost               uint64 // still in the processor when Close finished
	finished           bool
	failing            bool
	lastLog            time.Time
	failedSinceLastLog uint64
}

const logEvery = 10 * time.Second

// ExportSpans exports and counts; it reports success to the processor
// whatever happened (the failure is counted here).
func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.next.ExportSpans(ctx, spans)
	n := uint64(len(spans))
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.finished {
		return nil // counted as lost at Close
	}
	for range spans {
		<-e.tokens
	}
	if err == nil {
		e.exported += n
		if e.failing {
			e.failing = false
			e.log.Info("OTLP export recovered", "spans_failed_meanwhile", e.failedSinceLastLog)
			e.failedSinceLastLog = 0
		}
		return nil
	}
	e.failed += n
	e.failedSinceLastLog += n
	if !e.failing || time.Since(e.lastLog) >= logEvery {
		e.log.Warn("OTLP export failed: spans dropped", "spans", e.failedSinceLastLog, "err", err)
		e.failing, e.lastLog, e.failedSinceLastLog = true, time.Now(), 0
	}
	return nil
}

// Shutdown shuts the OTLP client down.
func (e *countingExporter) Shutdown(ctx context.Context) error { return e.next.Shutdown(ctx) }

// finish counts the spans the processor still holds as lost and makes
// later exports uncounted.
func (e *countingExporter) finish() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.finished {
		return
	}
	e.finished = true
	for {
		select {
		case <-e.tokens:
			e.lost++
		default:
			return
		}
	}
}

func (e *countingExporter) counts() (exported, failed, lost uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.exported, e.failed, e.lost
}
