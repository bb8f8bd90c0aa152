package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/internal/adaptive"
)

type traceFlags struct {
	pid      int
	duration time.Duration
	output   string
	detail   string
	policy   adaptive.Policy
}

// Detail modes of --detail.
var detailModes = []string{"auto", "always", "never"}

func newTraceCommand(g *globalFlags) *cobra.Command {
	f := &traceFlags{policy: adaptive.DefaultPolicy}
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Report every context deadline that expires in a running Go process",
		Long: `Attach to a running Go program (no code change, no restart) and print one
report per context deadline that expires, until interrupted, --duration ends or
the process exits.

Probes that run only when a deadline expires are always attached: a request
that finishes in time costs nothing. The detail probes (budget, elapsed time,
where the deadline was set) trap on every deadline the process sets, so by
default (--detail=auto) they are attached only while the process is timing
out: after --detail-threshold expiries within --detail-window, and detached
after --detail-quiet without one. Each switch is printed.`,
		Example: `  sudo tracer trace --pid 4242
  sudo tracer trace --pid 4242 -o json --detail always`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTrace(cmd, g, f) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.pid, "pid", 0, "process to trace (required)")
	fl.DurationVar(&f.duration, "duration", 0, "stop after this long (default: until interrupted or the process exits)")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.StringVar(&f.detail, "detail", "auto", "detail probes: auto, always or never")
	fl.IntVar(&f.policy.Threshold, "detail-threshold", f.policy.Threshold, "auto: expiries within --detail-window that attach detail")
	fl.DurationVar(&f.policy.Window, "detail-window", f.policy.Window, "auto: window for --detail-threshold")
	fl.DurationVar(&f.policy.Quiet, "detail-quiet", f.policy.Quiet, "auto: detach detail after this long without an expiry")
	return cmd
}

func runTrace(cmd *cobra.Command, g *globalFlags, f *traceFlags) error {
	log, err := g.logger()
	if err != nil {
		return err
	}
	format, err := export.ParseFormat(f.output)
	if err != nil {
		return err
	}
	if !contains(detailModes, f.detail) {
		return fmt.Errorf("unknown --detail %q: use auto, always or never", f.detail)
	}
	if err := f.policy.Validate(); err != nil {
		return err
	}
	if f.pid <= 0 {
		return errors.New("--pid is required: the process to trace")
	}
	exited, err := watchProcess(f.pid)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	probes, err := collector.StartGo(collector.GoConfig{PID: f.pid, Logger: log})
	if err != nil {
		return err
	}
	defer probes.Close()
	stderr := cmd.ErrOrStderr()

	w := export.NewTimeoutWriter(cmd.OutOrStdout(), format)
	pid := uint32(f.pid)
	setDetail := func(on bool, reason string) error {
		if err := probes.SetDetail(on); err != nil {
			return fmt.Errorf("switch detail probes: %w", err)
		}
		log.Info("detail probes switched", "pid", f.pid, "on", on, "reason", reason)
		return w.WriteDetail(time.Now(), pid, on, reason)
	}
	ctl := adaptive.New(f.policy)
	if f.detail == "always" {
		if err := setDetail(true, "--detail=always"); err != nil {
			return err
		}
	}
	// Said once everything the mode asks for is attached: tests and
	// scripts wait for this line.
	bin := probes.Binary()
	fmt.Fprintf(stderr, "tracing pid %d (%s, %s, %s): deadline expiries, detail %s\n", f.pid, bin.ExePath, bin.GoVersion, bin.Arch, f.detail)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var dropped uint64
	for {
		select {
		case d, ok := <-probes.Events():
			if !ok {
				return errors.New("event stream ended unexpectedly")
			}
			if err := w.Write(&d); err != nil {
				return fmt.Errorf("write report: %w", err)
			}
			if f.detail == "auto" && ctl.Observe(time.Now()) {
				if err := setDetail(true, fmt.Sprintf("%d expiries within %v", f.policy.Threshold, f.policy.Window)); err != nil {
					return err
				}
			}
		case <-tick.C:
			if f.detail == "auto" && ctl.Tick(time.Now()) {
				if err := setDetail(false, fmt.Sprintf("no expiry for %v", f.policy.Quiet)); err != nil {
					return err
				}
			}
			dropped = warnDropped(stderr, probes, dropped)
		case <-exited:
			drain(probes, w)
			warnDropped(stderr, probes, dropped)
			fmt.Fprintf(stderr, "process %d exited; stopping\n", f.pid)
			return nil
		case <-ctx.Done():
			warnDropped(stderr, probes, dropped)
			return nil
		}
	}
}

// drain writes the reports still queued when the target exited.
func drain(p *collector.GoProbes, w *export.TimeoutWriter) {
	deadline := time.After(200 * time.Millisecond)
	for {
		select {
		case d, ok := <-p.Events():
			if !ok {
				return
			}
			w.Write(&d)
		case <-deadline:
			return
		}
	}
}

func warnDropped(stderr interface{ Write([]byte) (int, error) }, p *collector.GoProbes, seen uint64) uint64 {
	s, err := p.Stats()
	if err != nil || s.Dropped <= seen {
		return seen
	}
	fmt.Fprintf(stderr, "warning: %d expiry reports lost (ring buffer full)\n", s.Dropped-seen)
	return s.Dropped
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
