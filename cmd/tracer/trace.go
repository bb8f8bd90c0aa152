package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/timeout-tracer/tracer/collector/goprobe"
	"github.com/timeout-tracer/tracer/collector/tcp"
	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/pipeline"
	"github.com/timeout-tracer/tracer/tick"
)

type traceFlags struct {
	targetFlags
	export    exportFlags
	output    string
	audit     bool
	hangAfter time.Duration
	record    string
}

// Detail modes of --detail.
var detailModes = []string{"auto", "always", "never"}

func newTraceCommand(g *globalFlags) *cobra.Command {
	f := &traceFlags{}
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
  sudo tracer trace --pid 4242 -o json --detail always
  sudo tracer trace --pid 4242 --otlp --otlp-protocol grpc --otlp-endpoint localhost:4317 --otlp-insecure --metrics-addr :9464`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTrace(cmd, g, f) },
	}
	fl := cmd.Flags()
	f.bind(fl, "trace")
	f.export.bind(fl)
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.DurationVar(&f.hangAfter, "hang-after", 10*time.Second, "with --audit: report a call without a deadline still waiting after this long (hung_call)")
	fl.StringVar(&f.record, "record", "", "also write the merged event stream to this file, as tracer record does: tracer replay FILE prints these reports again")
	fl.BoolVar(&f.audit, "audit", false, "attach the outbound-call probes (a trap per HTTP call) and report calls made with no deadline at all (deadline_missing)")
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
	ctx, cancel, exited, err := f.start(cmd.Context(), "trace")
	if err != nil {
		return err
	}
	defer cancel()
	stderr := cmd.ErrOrStderr()
	w := export.NewTimeoutWriter(cmd.OutOrStdout(), format)
	ex, err := startExporters(ctx, &f.export, log, stderr)
	if err != nil {
		return err
	}
	defer ex.close()
	reports := 0
	sink := []pipeline.Sink{
		ex.sink(),
		pipeline.Writer{W: w, Details: true},
		pipeline.SwitchLines{W: stderr},
		pipeline.Reports(func(*correlate.Report) error { reports++; return nil }),
	}
	if f.record != "" {
		rw, closeRec, err := openRecording(f.record, stderr)
		if err != nil {
			return err
		}
		defer closeRec()
		sink = append(sink, &pipeline.Recorder{W: rw})
	}
	p, err := pipeline.Start(pipeline.Config{PID: f.pid, Detail: f.detail, Policy: f.policy, Local: f.local, Storm: f.storm, Audit: f.audit,
		HangAfter: f.hangAfter, Logger: log}, pipeline.Tee(sink...))
	if err != nil {
		return err
	}
	defer p.Close()
	defer ex.attached(f.pid, p)()
	// Said once everything the mode asks for is attached: tests and
	// scripts wait for this line.
	bin := p.Probes().Binary()
	fmt.Fprintf(stderr, "tracing pid %d (%s, %s, %s): deadline expiries and TCP, detail %s\n", f.pid, bin.ExePath, bin.GoVersion, bin.Arch, f.detail)
	stop := watchLosses(stderr, p.Probes(), p.TCP())
	err = p.Run(ctx, exited)
	select {
	case <-exited:
		fmt.Fprintf(stderr, "process %d exited; stopping\n", f.pid)
	default:
	}
	stop()
	printTotals(stderr, p, reports)
	return err
}

// printTotals is the run's accounting, one line: every expiry the probes
// saw was reported or lost in the ring buffer (counted), and what the
// storm guard did not let them see is estimated.
func printTotals(stderr io.Writer, p *pipeline.Pipeline, reports int) {
	g, err := p.Probes().Stats()
	if err != nil {
		fmt.Fprintf(stderr, "totals: probe counters unreadable: %v\n", err)
		return
	}
	t, _ := p.TCP().Stats()
	s := p.StormStats()
	fmt.Fprintf(stderr, "totals: expiries seen %d, reported %d, lost %d (ring buffer full), undecodable %d; kernel events lost %d; storm guard trips %d, detached %v, expiries not seen (estimate) %d; hook runs the kernel skipped %d (go), %d (tcp); events behind the merge's watermark %d (delivered out of order); timers that fired on a context already cancelled by a parent's expiry %d (reported as the parent's); storm guard sheds %d (detail and call probes only, every expiry still seen); second timers merged %d (a deadline's two timers: net/http's Client.Timeout, grpc-go's server timer or a dial's socket deadline, and the context's; one expiry, reported once)\n",
		g.ExpiryHits, reports, g.Dropped, g.DecodeErrors, t.Lost, s.Trips, s.Detached.Round(time.Millisecond), s.UnseenEstimate, g.Missed, t.Missed, p.Late(), g.Raced, s.Sheds, g.Merged)
}

// warnGrowth prints format with the increase when a loss counter grew
// past *last, and remembers the new value.
func warnGrowth(w io.Writer, last *uint64, now uint64, format string) {
	if now > *last {
		fmt.Fprintf(w, format, now-*last)
		*last = now
	}
}

// watchLosses prints a warning line whenever either ring buffer lost
// events, until the returned stop is called (which checks once more).
func watchLosses(stderr io.Writer, g *goprobe.Process, t *tcp.Collector) (stop func()) {
	var goLost, tcpLost, goMissed, tcpMissed uint64
	check := func() {
		if s, err := g.Stats(); err == nil {
			warnGrowth(stderr, &goLost, s.Dropped, "warning: %d expiry reports lost (ring buffer full)\n")
			warnGrowth(stderr, &goMissed, s.Missed, "warning: the kernel skipped %d Go probe runs (another BPF program was running on that CPU): expiries may be missing\n")
		}
		if s, err := t.Stats(); err == nil {
			warnGrowth(stderr, &tcpLost, s.Lost, "warning: %d kernel TCP events lost (ring buffer full): network causes may be incomplete\n")
			warnGrowth(stderr, &tcpMissed, s.Missed, "warning: the kernel skipped %d TCP hook runs (the same hook was running on that CPU): network causes may be incomplete\n")
		}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tk := tick.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-tk.C:
				tk.Next()
				check()
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		check()
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
