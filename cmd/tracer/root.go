package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
)

// globalFlags are shared by every subcommand.
type globalFlags struct {
	logLevel string
}

func (g *globalFlags) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("invalid --log-level %q: use debug, info, warn or error", g.logLevel)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})), nil
}

func newRootCommand() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "tracer",
		Short: "Explain why Go requests time out: Go context deadlines joined with kernel TCP events",
		Long: `timeout-tracer watches the kernel's TCP machinery (retransmits, RTOs, SYN retries,
resets, zero windows) with eBPF tracepoints and tells what the network did to
the connections of a process.

Start with "tracer check" to see whether this machine can trace.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version prints what `tracer version` prints.
		Version: versionLine(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	root.AddCommand(newTraceCommand(g), newDaemonCommand(g), newTCPCommand(g), newRecordCommand(g), newReplayCommand(), newCheckCommand(), newVersionCommand())
	return root
}
