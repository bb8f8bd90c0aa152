package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/timeout-tracer/tracer/correlate"
	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/pipeline"
	"github.com/timeout-tracer/tracer/record"
)

type recordFlags struct {
	targetFlags
	out   string
	audit bool
}

// openRecording creates the event file path ("-": stdout) with its header.
func openRecording(path string, stdout io.Writer) (*record.Writer, func() error, error) {
	out, closeFile := stdout, func() error { return nil }
	if path != "-" {
		file, err := os.Create(path)
		if err != nil {
			return nil, nil, fmt.Errorf("create %s: %w", path, err)
		}
		out, closeFile = file, file.Close
	}
	host, _ := os.Hostname()
	w, err := record.NewWriter(out, record.Header{Host: host, Started: time.Now(),
		Note: "tracer " + strings.Join(os.Args[1:], " ")})
	if err != nil {
		closeFile()
		return nil, nil, fmt.Errorf("write %s: %w", path, err)
	}
	return w, closeFile, nil
}

func newRecordCommand(g *globalFlags) *cobra.Command {
	f := &recordFlags{}
	cmd := &cobra.Command{
		Use:   "record",
		Short: "Record the raw event stream of a Go process (kernel TCP + deadlines) to a file",
		Long: `Record attaches like "tracer trace" and writes every event, merged in time
order, to a file (JSON lines, one event each, after a header). "tracer replay
FILE" runs the correlator on it and prints the same reports; recordings make
bug reports and correlator tests reproducible without root.`,
		Example: `  sudo tracer record --pid 4242 -o storm.events --duration 2m
  tracer replay storm.events`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRecord(cmd, g, f) },
	}
	fl := cmd.Flags()
	f.bind(fl, "record")
	fl.StringVarP(&f.out, "output", "o", "", "file to write (required; - for standard output)")
	fl.BoolVar(&f.audit, "audit", false, "also record the outbound calls (a trap per HTTP call): tracer replay then prints deadline_missing and hung_call")
	return cmd
}

func runRecord(cmd *cobra.Command, g *globalFlags, f *recordFlags) error {
	log, err := g.logger()
	if err != nil {
		return err
	}
	if f.out == "" {
		return errors.New("-o FILE is required: where to write the events")
	}
	ctx, cancel, exited, err := f.start(cmd.Context(), "record")
	if err != nil {
		return err
	}
	defer cancel()
	w, closeRec, err := openRecording(f.out, cmd.OutOrStdout())
	if err != nil {
		return err
	}
	defer closeRec()
	stderr := cmd.ErrOrStderr()
	rec := &pipeline.Recorder{W: w}
	p, err := pipeline.Start(pipeline.Config{PID: f.pid, Detail: f.detail, Policy: f.policy, Local: f.local, Storm: f.storm, Audit: f.audit, Logger: log},
		pipeline.Tee(rec, pipeline.SwitchLines{W: stderr, Details: true}))
	if err != nil {
		return err
	}
	defer p.Close()
	fmt.Fprintf(stderr, "recording pid %d to %s\n", f.pid, f.out)
	stop := watchLosses(stderr, p.Probes(), p.TCP())
	err = p.Run(ctx, exited)
	stop()
	select {
	case <-exited:
		fmt.Fprintf(stderr, "process %d exited; stopping\n", f.pid)
	default:
	}
	fmt.Fprintf(stderr, "recorded %d events\n", rec.N)
	return err
}

func newReplayCommand() *cobra.Command {
	var output string
	var hangAfter time.Duration
	cmd := &cobra.Command{
		Use:   "replay FILE",
		Short: "Run the correlator on a recorded event file and print its reports",
		Long: `Replay reads a file written by "tracer record" and prints the timeout reports
the correlator makes of it, exactly as "tracer trace" would have, and the
audit's deadline_missing and hung_call lines of a recording made with
--audit (give the same --hang-after). It needs no root and no kernel
support.`,
		Example: `  tracer replay storm.events -o json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := export.ParseFormat(output)
			if err != nil {
				return err
			}
			file, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("open recording: %w", err)
			}
			defer file.Close()
			r, err := record.NewReader(file)
			if err != nil {
				return fmt.Errorf("read %s: %w", args[0], err)
			}
			w := export.NewTimeoutWriter(cmd.OutOrStdout(), format)
			cfg := correlate.StreamConfig{Correlator: correlate.DefaultConfig(),
				Audit: &correlate.AuditConfig{Missing: true, Hung: true, HangAfter: hangAfter}}
			st, err := correlate.Replay(r, cfg, correlate.Outputs{ReportFunc: w.WriteReport, AuditFunc: func(l *correlate.AuditLine) error {
				if l.Kind == correlate.AuditHung {
					return w.WriteHung(&l.Call, l.Peer, l.Waiting, l.Conn)
				}
				return w.WriteMissing(&l.Call, l.Peer)
			}})
			if err != nil {
				return fmt.Errorf("replay %s: %w", args[0], err)
			}
			if ev := st.SocketsEvicted + st.EventsEvicted + st.ActivityEvicted + st.GoroutinesEvicted + st.BindingsEvicted + st.ProcessesEvicted; ev > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: the correlator evicted %d entries (state caps): some causes may be incomplete\n", ev)
			}
			if st.OutOfOrder > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d events were out of time order in the recording\n", st.OutOfOrder)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	cmd.Flags().DurationVar(&hangAfter, "hang-after", 10*time.Second, "with a recording made with --audit: report a call without a deadline still waiting this long as hung_call, as tracer trace did")
	return cmd
}
