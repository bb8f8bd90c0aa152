package main

import (
	"bytes"
	"strings"
	"testing"
)

// `tracer --version` and `tracer version` print the same line.
func TestVersionFlagAndCommand(t *testing.T) {
	run := func(args ...string) string {
		t.Helper()
		root := newRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("tracer %v: %v", args, err)
		}
		return out.String()
	}
	cmd, flag := run("version"), run("--version")
	if cmd != flag || !strings.HasPrefix(cmd, "tracer "+version+" (commit ") || strings.Count(cmd, "\n") != 1 {
		t.Errorf("tracer version printed %q, tracer --version %q; want one same line", cmd, flag)
	}
}
