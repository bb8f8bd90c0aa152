package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go toolchain",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			commit, dirty := "unknown", ""
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					switch s.Key {
					case "vcs.revision":
						commit = s.Value
					case "vcs.modified":
						if s.Value == "true" {
							dirty = "+dirty"
						}
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "tracer %s (commit %s%s, %s, %s/%s)\n",
				version, commit, dirty, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
