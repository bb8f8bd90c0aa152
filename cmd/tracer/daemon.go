package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/pipeline"
	"github.com/timeout-tracer/tracer/pipeline/adaptive"
	"github.com/timeout-tracer/tracer/pipeline/agent"
	"github.com/timeout-tracer/tracer/pipeline/storm"
	"github.com/timeout-tracer/tracer/workload"
	"github.com/timeout-tracer/tracer/workload/kube"
)

type daemonFlags struct {
	export           exportFlags
	audit            bool
	hangAfter        time.Duration
	metricsNodeTCP   bool
	config           string
	logFormat        string
	output           string
	nodeName         string
	cgroupRoot       string
	procRoot         string
	includeExe       []string
	excludeExe       []string
	includeContainer []string
	excludeContainer []string
	includeNamespace []string
	excludeNamespace []string
	includePod       []string
	excludePod       []string
	maxProcesses     int
	detail           string
	local            string
	policy           adaptive.Policy
	storm            storm.Policy
	shutdownTimeout  time.Duration
	rescan           time.Duration
}

func newDaemonCommand(g *globalFlags) *cobra.Command {
	f := &daemonFlags{}
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Node agent: trace every Go process of the node, export spans and metrics",
		Long: `Run as the node agent (deploy/daemonset.yaml): the kernel TCP collector runs
once for the node; Go processes are found by scanning /proc at start and by
following process execs and exits in the kernel, traced automatically (the
deadline probes are attached once per executable file and filtered per
process) and detached when they exit.

Serves /metrics, /healthz (alive) and /readyz (the kernel collectors are
attached) on --metrics-addr. Reports go to OTLP (--otlp, OTEL_EXPORTER_OTLP_*),
to Prometheus metrics, and to stdout (-o json|table|none). SIGTERM detaches
everything and flushes the exporters within --shutdown-timeout.

Every flag can also come from --config, a YAML file of flag names and values
(lists for the repeatable ones); flags on the command line win.`,
		Example: `  sudo tracer daemon
  sudo tracer daemon --otlp --otlp-endpoint tempo:4317 --otlp-protocol grpc --otlp-insecure --log-format json
  sudo tracer daemon --include-exe 'api-*' --exclude-namespace kube-system --max-processes 50`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDaemon(cmd, g, f) },
	}
	fl := cmd.Flags()
	f.export.bind(fl)
	f.export.metricsAddr = ":9464"
	fl.Lookup("metrics-addr").DefValue = ":9464"
	fl.Lookup("metrics-addr").Usage = "serve /metrics, /healthz and /readyz on this address (\"\" turns them off)"
	f.policy = adaptive.DefaultPolicy()
	fl.StringVar(&f.config, "config", "", "YAML file of flag values (flag name: value); command-line flags win")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format on stderr: text or json")
	fl.StringVarP(&f.output, "output", "o", "json", "reports on stdout: json, table or none")
	fl.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name, for the Kubernetes pod watch (default $NODE_NAME)")
	fl.StringVar(&f.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "where the host's cgroup file system is mounted (CPU throttling of traced processes)")
	fl.StringVar(&f.procRoot, "proc-root", "/proc", "where the host's /proc is, for discovery and identity (the agent itself must share the host's PID namespace: hostPID)")
	fl.StringSliceVar(&f.includeExe, "include-exe", nil, "trace only executables whose name or path matches one of these globs (repeatable)")
	fl.StringSliceVar(&f.excludeExe, "exclude-exe", nil, "never trace executables whose name or path matches one of these globs (repeatable; wins over include)")
	fl.StringSliceVar(&f.includeContainer, "include-container", nil, "trace only processes of containers whose ID starts with one of these (repeatable)")
	fl.StringSliceVar(&f.excludeContainer, "exclude-container", nil, "never trace processes of containers whose ID starts with one of these (repeatable)")
	fl.StringSliceVar(&f.includeNamespace, "include-namespace", nil, "trace only pods of these Kubernetes namespaces (repeatable)")
	fl.StringSliceVar(&f.excludeNamespace, "exclude-namespace", nil, "never trace pods of these Kubernetes namespaces (repeatable)")
	fl.StringSliceVar(&f.includePod, "include-pod", nil, "trace only pods whose name matches one of these globs (repeatable)")
	fl.StringSliceVar(&f.excludePod, "exclude-pod", nil, "never trace pods whose name matches one of these globs (repeatable)")
	fl.IntVar(&f.maxProcesses, "max-processes", 256, "trace at most this many processes; the others are skipped, logged and counted (reason cap)")
	fl.StringVar(&f.detail, "detail", "auto", "detail probes: auto, always or never")
	fl.StringVar(&f.local, "local", "auto", "local causes (CPU throttling, run-queue delay, GC pauses): auto (the scheduler hooks only while some process's detail probes are on), always or never")
	fl.IntVar(&f.policy.Threshold, "detail-threshold", f.policy.Threshold, "auto: expiries of a process within --detail-window that attach its detail probes")
	fl.DurationVar(&f.policy.Window, "detail-window", f.policy.Window, "auto: window for --detail-threshold")
	fl.DurationVar(&f.policy.Quiet, "detail-quiet", f.policy.Quiet, "auto: detach a process's detail probes after this long without an expiry")
	f.storm = storm.DefaultPolicy()
	fl.Uint64Var(&f.storm.MaxHitsPerSec, "storm-max-hits", f.storm.MaxHitsPerSec, "storm guard: expiries per second of one executable's processes above which its probes are detached for --storm-cooldown (0: never)")
	fl.DurationVar(&f.storm.Cooldown, "storm-cooldown", f.storm.Cooldown, "storm guard: how long probes stay detached after a storm trips the guard")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM, detach and flush within this long, then exit anyway")
	fl.DurationVar(&f.rescan, "rescan", 30*time.Second, "scan /proc again this often (processes whose exec event was lost)")
	fl.BoolVar(&f.metricsNodeTCP, "metrics-node-tcp", false, "count the TCP metrics (retransmits, resets, connect failures, RTT) of every socket of the node, not only the traced processes'")
	fl.BoolVar(&f.audit, "audit", false, "attach the outbound-call probes to every traced process (a trap per HTTP call and gRPC stream) and report calls made with no deadline at all (deadline_missing) and calls without one still waiting after --hang-after (hung_call)")
	fl.DurationVar(&f.hangAfter, "hang-after", 10*time.Second, "with --audit: report a call without a deadline still waiting after this long (hung_call)")
	return cmd
}

// applyConfig sets the flags the config file names and the command line
// did not.
func applyConfig(fl *pflag.FlagSet, file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read --config: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("parse --config %s: %w", file, err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := fl.Lookup(k)
		if f == nil || k == "config" {
			return fmt.Errorf("--config %s: unknown setting %q (settings are the daemon's flag names)", file, k)
		}
		if f.Changed {
			continue
		}
		var vals []string
		switch v := m[k].(type) {
		case []any:
			for _, x := range v {
				vals = append(vals, fmt.Sprint(x))
			}
		case nil:
			continue
		default:
			vals = []string{fmt.Sprint(v)}
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			if err := sv.Replace(vals); err != nil {
				return fmt.Errorf("--config %s: %s: %w", file, k, err)
			}
			continue
		}
		if len(vals) != 1 {
			return fmt.Errorf("--config %s: %s takes one value, not a list", file, k)
		}
		if err := f.Value.Set(vals[0]); err != nil {
			return fmt.Errorf("--config %s: %s: %w", file, k, err)
		}
	}
	return nil
}

func (f *daemonFlags) logger(g *globalFlags, fl *pflag.FlagSet, root *pflag.FlagSet) (*slog.Logger, error) {
	level := g.logLevel
	if lf := root.Lookup("log-level"); lf != nil && !lf.Changed {
		level = "info" // an agent says what it attaches and skips
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("invalid --log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("unknown --log-format %q: use text or json", f.logFormat)
}

func (f *daemonFlags) validate() error {
	if !contains(detailModes, f.detail) {
		return fmt.Errorf("unknown --detail %q: use auto, always or never", f.detail)
	}
	if !contains(pipeline.LocalModes, f.local) {
		return fmt.Errorf("unknown --local %q: use auto, always or never", f.local)
	}
	if err := f.policy.Validate(); err != nil {
		return err
	}
	if err := f.storm.Validate(); err != nil {
		return err
	}
	if f.maxProcesses <= 0 {
		return fmt.Errorf("--max-processes must be positive, not %d", f.maxProcesses)
	}
	if f.shutdownTimeout <= 0 {
		return errors.New("--shutdown-timeout must be positive")
	}
	if st, err := os.Stat(f.procRoot); err != nil || !st.IsDir() {
		return fmt.Errorf("--proc-root %s is not a readable directory: %v", f.procRoot, err)
	}
	return nil
}

func runDaemon(cmd *cobra.Command, g *globalFlags, f *daemonFlags) error {
	fl := cmd.Flags()
	if f.config != "" {
		if err := applyConfig(fl, f.config); err != nil {
			return err
		}
	}
	log, err := f.logger(g, fl, cmd.Root().PersistentFlags())
	if err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return err
	}
	if err := hostPIDNamespace(); err != nil {
		return err
	}
	setMemoryLimit(log)
	filter, err := workload.NewFilter(workload.FilterConfig{
		IncludeExe: f.includeExe, ExcludeExe: f.excludeExe,
		IncludeContainer: f.includeContainer, ExcludeContainer: f.excludeContainer,
		IncludeNamespace: f.includeNamespace, ExcludeNamespace: f.excludeNamespace,
		IncludePod: f.includePod, ExcludePod: f.excludePod,
	})
	if err != nil {
		return err
	}
	var w *export.TimeoutWriter
	switch f.output {
	case "none":
	default:
		format, err := export.ParseFormat(f.output)
		if err != nil {
			return err
		}
		w = export.NewTimeoutWriter(cmd.OutOrStdout(), format)
	}
	// Flags first, privileges next: a mistake is said before anything
	// else is tried.
	if err := collector.Preflight(); err != nil {
		return err
	}
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	ex, err := startExporters(ctx, &f.export, log, io.Discard)
	if err != nil {
		return err
	}
	if ex.srv != nil {
		ex.srv.Health()
		log.Info("serving /metrics, /healthz, /readyz", "addr", ex.srv.Addr().String())
	}
	// Reports and audit lines go to the exporters and, unless -o none,
	// to standard output; switches to the log.
	sink := pipeline.Tee(ex.sink(), pipeline.LogSwitches{Log: log})
	if w != nil {
		sink = pipeline.Tee(sink, pipeline.Writer{W: w})
	}
	kcfg := kube.ConfigFromEnv(os.Getenv)
	if f.nodeName != "" {
		kcfg.NodeName = f.nodeName
	}
	kcfg.Logger = log
	pods, err := kube.Start(ctx, kcfg)
	if err != nil {
		ex.close()
		return err
	}
	defer pods.Close()
	cfg := agent.Config{
		Pipeline: pipeline.Config{Detail: f.detail, Policy: f.policy, Logger: log, Audit: f.audit, HangAfter: f.hangAfter, KernelAll: f.metricsNodeTCP,
			Local: pipeline.LocalConfig{Mode: f.local, CgroupRoot: f.cgroupRoot}, Storm: f.storm},
		Sink:     sink,
		Admit:    filter.Match,
		NeedsPod: filter.NeedsPod() && pods.Enabled(),
		Pod: func(uid string) (agent.Pod, bool) {
			p, ok := pods.Lookup(uid)
			return agent.Pod{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels}, ok
		},
		MaxProcesses: f.maxProcesses,
		ProcRoot:     f.procRoot,
		Rescan:       f.rescan,
		Logger:       log,
	}
	// Each process's identity is resolved once, when it is attached, and
	// the exporters carry it: they read no /proc.
	cfg.OnAttach = func(id agent.Identity, _ time.Duration) { ex.procs.Add(export.ProcessOf(id)) }
	cfg.OnNamed = func(id agent.Identity) { ex.procs.Add(export.ProcessOf(id)) }
	if m := ex.metrics; m != nil {
		cfg.OnAttach = func(id agent.Identity, since time.Duration) {
			ex.procs.Add(export.ProcessOf(id))
			m.Attached(1)
			if since > 0 {
				m.ObserveAttach(since)
			}
		}
		cfg.OnDetach = func(agent.Identity) { m.Attached(-1) }
		cfg.OnSkip = func(_ agent.Identity, reason string) { m.ProcessSkipped(reason) }
	}
	a, err := agent.Start(cfg)
	if err != nil {
		ex.close()
		return err
	}
	ex.ran = true
	if m := ex.metrics; m != nil {
		a.Pipeline().ExportLosses(m)
		m.LostEvents("proc", func() (uint64, error) { return a.ProcEventsLost(), nil })
	}
	if ex.srv != nil {
		ex.srv.Ready()
	}
	uprobes := "perf_event"
	if a.Pipeline().Node().UprobeMulti() {
		uprobes = "uprobe_multi"
	}
	log.Info("node agent ready", "node", f.nodeName, "max_processes", f.maxProcesses, "detail", f.detail, "uprobes", uprobes)
	runErr := a.Run(ctx)

	// Shutdown: detach and flush within the bound, whatever hangs.
	done := make(chan error, 1)
	go func() {
		err := a.Close()
		ex.close()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			log.Warn("detach", "err", err)
		}
	case <-time.After(f.shutdownTimeout):
		fmt.Fprintf(stderr, "tracer: shutdown took longer than --shutdown-timeout=%v: exiting; the kernel frees what is left with the process\n", f.shutdownTimeout)
		return errors.New("shutdown timed out")
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	log.Info("node agent stopped")
	return nil
}

// hostPIDNamespace fails when the agent runs in a nested PID namespace: the
// kernel's events name processes by their host PIDs, and probes attach
// through this process's own /proc, so a containerised agent that does not
// share the host's PID namespace would see PIDs it cannot open. The initial
// PID namespace has a fixed inode number (PROC_PID_INIT_INO, 0xEFFFFFFC).
func hostPIDNamespace() error {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return nil // no way to tell: the attach errors will say
	}
	if ns != "pid:[4026531836]" {
		return fmt.Errorf("the node agent runs in a nested PID namespace (%s): it must share the host's (Kubernetes: hostPID: true, as deploy/daemonset.yaml sets; Docker: --pid=host)", ns)
	}
	return nil
}
