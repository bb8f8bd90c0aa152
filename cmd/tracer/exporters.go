package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/event"
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
}

func (f *exportFlags) bind(fl *pflag.FlagSet) {
	fl.BoolVar(&f.otlp, "otlp", false, "export each timeout as a span in its request's trace (OTLP; endpoint and headers also from OTEL_EXPORTER_OTLP_*)")
	fl.StringVar(&f.endpoint, "otlp-endpoint", "", "OTLP endpoint, host:port or URL (default: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, else localhost:4317 for grpc, localhost:4318 for http/protobuf)")
	fl.StringVar(&f.protocol, "otlp-protocol", "", "OTLP protocol: grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL, else http/protobuf)")
	fl.BoolVar(&f.insecure, "otlp-insecure", false, "send OTLP in plaintext, without TLS")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address at /metrics (e.g. :9464)")
	fl.DurationVar(&f.metricsLinger, "metrics-linger", 0, "after tracing ends, keep serving /metrics this long, so a last scrape sees the final counts")
}

// exportFlushTime bounds how long the end of a run waits for the OTLP
// queue to drain: a dead endpoint must not hold the exit.
const exportFlushTime = 5 * time.Second

// exporters are what the flags started: fed by the pipeline's sink,
// closed once at the end.
type exporters struct {
	flags       *exportFlags
	log         *slog.Logger
	stderr      io.Writer
	list        []export.Exporter
	otlp        *export.OTLP
	metrics     *export.Metrics
	procs       *export.Processes
	srv         *http.Server
	mux         *http.ServeMux
	metricsAddr net.Addr
	served      chan struct{}
	ran         bool // a pipeline was attached: say at the end what was exported
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
		e.metrics = export.NewMetrics(export.MetricsConfig{Processes: e.procs, EphemeralPorts: localPortRange(), Version: version})
		ln, err := net.Listen("tcp", f.metricsAddr)
		if err != nil {
			return nil, fmt.Errorf("listen on --metrics-addr: %w", err)
		}
		e.mux = http.NewServeMux()
		e.mux.Handle("/metrics", e.metrics.Handler())
		e.metricsAddr = ln.Addr()
		e.srv = &http.Server{Handler: e.mux, ReadHeaderTimeout: 10 * time.Second}
		e.served = make(chan struct{})
		go func() {
			defer close(e.served)
			if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("serve /metrics", "err", err)
			}
		}()
		e.list = append(e.list, e.metrics)
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
		e.list = append(e.list, e.otlp)
	}
	return e, nil
}

// sink adds the exporters to a pipeline sink: a report goes to every
// exporter and then to the sink's own Report; TCP events, calls and hung
// calls feed the metrics too.
func (e *exporters) sink(s pipeline.Sink) pipeline.Sink {
	if len(e.list) > 0 {
		next := s.Report
		s.Report = func(r *correlate.Report) error {
			for _, x := range e.list {
				x.Export(r)
			}
			if next == nil {
				return nil
			}
			return next(r)
		}
	}
	if e.metrics != nil {
		m := e.metrics
		s.TCP = func(ev *event.TCP) error { m.ObserveTCP(ev); return nil }
		s.Call = func(c *event.Call) error { m.ObserveCall(c); return nil }
		hung := s.Hung
		s.Hung = func(c *event.Call, peer string, waiting time.Duration, conn *event.TCP) error {
			m.ObserveHung(c)
			if hung == nil {
				return nil
			}
			return hung(c, peer, waiting, conn)
		}
	}
	return s
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
	fmt.Fprintf(e.stderr, "serving metrics on http://%s/metrics\n", e.metricsAddr)
	e.metrics.Attached(1)
	e.metrics.LostEvents("tcp", func() (uint64, error) {
		s, err := p.TCP().Stats()
		return s.Lost, err
	})
	e.metrics.LostEvents("go", func() (uint64, error) {
		s, err := p.Probes().Stats()
		return s.Dropped, err
	})
	e.metrics.MissedRuns("tcp", func() (uint64, error) {
		s, err := p.TCP().Stats()
		return s.Missed, err
	})
	e.metrics.MissedRuns("go", func() (uint64, error) {
		s, err := p.Probes().Stats()
		return s.Missed, err
	})
	e.metrics.WatchStorm(func() export.StormStats {
		s := p.StormStats()
		return export.StormStats{Trips: s.Trips, DetachedSeconds: s.Detached.Seconds(), UnseenEstimate: s.UnseenEstimate}
	})
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
		if e.flags.metricsLinger > 0 {
			time.Sleep(e.flags.metricsLinger)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = e.srv.Shutdown(ctx)
		cancel()
		<-e.served
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
