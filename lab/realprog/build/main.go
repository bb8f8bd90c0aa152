// Command build builds the real-program suite's programs (lab/realprog)
// into their cache, once per machine: .ci/deps runs it, so that the
// suite's test does not spend its time building. It prints each path.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/timeout-tracer/tracer/lab/realprog"
)

func main() {
	failed := false
	for _, p := range realprog.All() {
		start := time.Now()
		path, err := p.Build()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			failed = true
			continue
		}
		fmt.Printf("%s %s@%s: %s (%.0f s)\n", p.Name, p.Module, p.Version, path, time.Since(start).Seconds())
	}
	if failed {
		os.Exit(1)
	}
}
