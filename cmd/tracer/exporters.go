package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/pipeline"
	"github.com/timeout-tracer/tracer/workload"
)

// exportFlags are the OTLP and Prometheus options of the commands that
// produce reports (trace; the daemon later).
type exportFlags struct {
	otlp          bool
	endpoint      string
	protocol      string
	insecure      bool
	metricsAddr   string
	metricsLinger time.Duration
	peerIdle      time.Duration
}

func (f *exportFlags) bind(fl *pflag.FlagSet) {
	fl.BoolVar(&f.otlp, "otlp", false, "export each timeout as a span in its request's trace (OTLP; endpoint and headers also from OTEL_EXPORTER_OTLP_*)")
	fl.StringVar(&f.endpoint, "otlp-endpoint", "", "OTLP endpoint, host:port or URL (default: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, else localhost:4317 for grpc, localhost:4318 for http/protobuf)")
	fl.StringVar(&f.protocol, "otlp-protocol", "", "OTLP protocol: grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL, else http/protobuf)")
	fl.BoolVar(&f.insecure, "otlp-insecure", false, "send OTLP in plaintext, without TLS")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address at /metrics (e.g. :9464)")
	fl.DurationVar(&f.peerIdle, "metrics-peer-idle", 10*time.Minute, "remove a peer's TCP series after this long without an event, freeing its slot of the 256 (negative: never)")
	fl.DurationVar(&f.metricsLinger, "metrics-linger", 0, "after tracing ends, keep serving /metrics this long, so a last scrape sees the final counts")
}

// exportFlushTime bounds how long the end of a run waits for the OTLP
// queue to drain: a dead endpoint must not hold the exit.
const exportFlushTime = 5 * time.Second

// exporters are what the flags started: fed by the pipeline's sink,
// closed once at the end.
type exporters struct {
	flags   *exportFlags
	log     *slog.Logger
	stderr  io.Writer
	otlp    *export.OTLP
	metrics *export.Metrics
	procs   *export.Processes
	srv     *export.Server
	ran     bool // a pipeline was attached: say at the end what was exported
}

func startExporters(ctx context.Context, f *exportFlags, log *slog.Logger, stderr io.Writer) (_ *exporters, err error) {
	if !f.otlp && (f.endpoint != "" || f.protocol != "" || f.insecure) {
		return nil, errors.New("--otlp-endpoint, --otlp-protocol and --otlp-insecure need --otlp")
	}
	if f.protocol != "" && !contains(export.Protocols, f.protocol) {
		return nil, fmt.Errorf("unknown --otlp-protocol %q: use grpc or http/protobuf", f.protocol)
	}
	e := &exporters{flags: f, log: log, stderr: stderr, procs: export.NewProcesses(0)}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if f.metricsAddr != "" {
		e.metrics = export.NewMetrics(export.MetricsConfig{Processes: e.procs, EphemeralPorts: localPortRange(), Version: version, PeerIdle: f.peerIdle})
		if e.srv, err = export.Serve(f.metricsAddr, e.metrics, log); err != nil {
			return nil, err
		}
	}
	if f.otlp {
		e.otlp, err = export.NewOTLP(ctx, export.OTLPConfig{Protocol: f.protocol, Endpoint: f.endpoint, Insecure: f.insecure,
			Processes: e.procs, Version: version, Logger: log})
		if err != nil {
			return nil, err
		}
		if e.metrics != nil {
			e.metrics.WatchOTLP(e.otlp.Stats)
		}
	}
	return e, nil
}

// sink is the exporters as one pipeline sink: reports to each exporter;
// TCP events, calls and hung calls to the metrics too.
func (e *exporters) sink() pipeline.Sink {
	var sinks []pipeline.Sink
	if e.metrics != nil {
		sinks = append(sinks, pipeline.Metrics{M: e.metrics})
	}
	if e.otlp != nil {
		sinks = append(sinks, pipeline.Exporter{X: e.otlp})
	}
	return pipeline.Tee(sinks...)
}

// attached tells the exporters that the pipeline traces pid: its identity
// is resolved now, once (its last reports may come after it exits), and
// its ring buffers' losses are exported. Call the returned func once it is
// closed.
func (e *exporters) attached(pid int, p *pipeline.Pipeline) (detached func()) {
	e.ran = true
	id, err := workload.Identify("/proc", pid)
	if err != nil {
		e.log.Warn("process identity not read: exporters name it by its command", "pid", pid, "err", err)
		id = workload.Identity{PID: pid, ExeName: filepath.Base(p.Probes().Binary().ExePath)}
	}
	if svc, err := workload.ReadService("/proc", pid); err == nil {
		id.Service = svc
	}
	e.procs.Add(export.ProcessOf(id))
	if e.metrics == nil {
		return func() {}
	}
	fmt.Fprintf(e.stderr, "serving metrics on http://%s/metrics\n", e.srv.Addr())
	e.metrics.Attached(1)
	p.ExportLosses(e.metrics)
	return func() { e.metrics.Attached(-1) }
}

// close flushes the OTLP queue (at most exportFlushTime), says what was
// not exported, keeps /metrics up for --metrics-linger, and stops it.
func (e *exporters) close() {
	if e.otlp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), exportFlushTime)
		if err := e.otlp.Close(ctx); err != nil {
			e.log.Warn("close the OTLP exporter", "err", err)
		}
		cancel()
		if s := e.otlp.Stats(); e.ran {
			fmt.Fprintf(e.stderr, "otlp: %d spans exported, %d failed, %d dropped (queue full), %d dropped at exit\n",
				s.Exported, s.Failed, s.DroppedQueueFull, s.DroppedShutdown)
		}
	}
	if e.srv != nil {
		e.srv.Close(e.flags.metricsLinger)
	}
}

// localPortRange is this host's ephemeral port range, which the metrics
// never take as a port label; the kernel's default when unreadable.
func localPortRange() [2]uint16 {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return [2]uint16{}
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return [2]uint16{}
	}
	lo, err1 := strconv.ParseUint(f[0], 10, 16)
	hi, err2 := strconv.ParseUint(f[1], 10, 16)
	if err1 != nil || err2 != nil || lo > hi {
		return [2]uint16{}
	}
	return [2]uint16{uint16(lo), uint16(hi)}
}
