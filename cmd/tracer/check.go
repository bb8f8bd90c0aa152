package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/timeout-tracer/tracer/collector"
)

func newCheckCommand() *cobra.Command {
	var pid int
	cmd := &cobra.Command{
		Use:   "check [--pid N]",
		Short: "Check that this machine can trace, and say what to fix if not",
		Long: `Check probes the kernel (BTF, capabilities, ring buffers) and really loads and
attaches the TCP collector, then detaches it. It lists every tracepoint with the
program type it attached with (tp_btf, else raw_tp).

It then does to one process what "tracer trace --pid" does: opens its
/proc/PID/exe, maps and root, analyses its executable and attaches the Go
deadline uprobes, then detaches them. With --pid that process is the one you
mean to trace; without, the tracer's own. Every failure names the missing
capability or setting (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE for other users'
processes, CAP_SYS_ADMIN for perf-event uprobes, ...); checks that cannot run
for lack of privileges are skipped, not blamed on the kernel.

Exit status 0 means tracing works.

  tracer check
  sudo tracer check --pid $(pgrep -n my-service)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pid < 0 {
				return fmt.Errorf("--pid %d: want a process ID", pid)
			}
			r := collector.Check(collector.CheckConfig{PID: pid})
			out := cmd.OutOrStdout()
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			for _, it := range r.Items {
				mark := "ok"
				switch {
				case it.Skip:
					mark = "skip"
				case !it.OK:
					mark = "FAIL"
				case it.Warn:
					mark = "warn"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, it.Name, it.Detail)
				if (!it.OK || it.Warn) && !it.Skip && it.Fix != "" {
					fmt.Fprintf(tw, "\t\tfix: %s\n", it.Fix)
				}
			}
			tw.Flush()
			if len(r.Hooks) > 0 {
				fmt.Fprintln(out, "\ntracepoints:")
				tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				for _, h := range r.Hooks {
					how, note := h.Type, h.Purpose
					switch {
					case how != "" && h.OnDemand != "":
						note += " (attached " + h.OnDemand + ")"
					case how != "":
					case h.Skipped != "":
						how, note = "skipped", h.Skipped
					default:
						how = "missing"
						if h.Err != nil {
							note += ": " + h.Err.Error()
						}
					}
					req := "optional"
					if h.Required {
						req = "required"
					}
					fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", h.Tracepoint, how, req, note)
				}
				tw.Flush()
			}
			if !r.OK {
				return errors.New("tracing does not work on this machine: see FAIL lines above")
			}
			fmt.Fprintln(out, "\ntracing works")
			return nil
		},
	}
	cmd.Flags().IntVar(&pid, "pid", 0, "check tracing this process (default: the tracer's own)")
	return cmd
}
