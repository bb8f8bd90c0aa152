package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/timeout-tracer/tracer/collector/check"
)

func newCheckCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "Check that this machine can trace, and say what to fix if not",
		Long: `Check probes the kernel (BTF, capabilities, ring buffers) and really loads and
attaches the TCP collector, then detaches it. It lists every tracepoint with the
program type it attached with (tp_btf, else raw_tp). Exit status 0 means tracing
works.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := check.Run()
			out := cmd.OutOrStdout()
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			for _, it := range r.Items {
				mark := "ok"
				if !it.OK {
					mark = "FAIL"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, it.Name, it.Detail)
				if !it.OK && it.Fix != "" {
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
}
