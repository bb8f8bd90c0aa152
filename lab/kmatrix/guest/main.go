// Command guest runs the kernel-matrix checks on the kernel it finds itself
// on: it loads and attaches every program the tracer ships, runs the Go
// deadline probes against a Go target and makes a loopback retransmit, and
// prints one line per check for the host-side driver (lab/kmatrix):
//
//	KMATRIX info release="<uname -r>" arch=<GOARCH>
//	KMATRIX check=<name> result=pass|known|fail secs=<s> detail="..."
//	KMATRIX hook=<tracepoint> mode=auto|raw type=tp_btf|raw_tp|skipped|absent detail="..."
//	KMATRIX-DONE exit=<code>
//
// "known" is a documented limitation of the kernel, not a failure.
//
// Packed as the /init of an initramfs it is PID 1: it mounts what the
// checks need, brings lo up, runs them and powers the machine off. Run
// directly (the host row of the matrix) it only runs the checks.
//
// It needs the test programs deadlines, tcpsink and tcpclient, built for
// the same architecture, in -bin.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

func main() {
	pid1 := os.Getpid() == 1
	defBin := "/bin"
	if !pid1 {
		exe, _ := os.Executable()
		defBin = filepath.Dir(exe)
	}
	cfg := config{}
	flag.StringVar(&cfg.bin, "bin", defBin, "directory holding deadlines, tcpsink and tcpclient for this architecture")
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds of the deadlines target per Go check")
	// An emulated single CPU can stall a goroutine for tens of milliseconds
	// (seen with 30ms: a deadline that passed inside WithDeadlineCause, and
	// a timer that fired before WithDeadlineCause returned); the budget
	// stays well above such stalls so that the checks test the kernel.
	// 150 ms/±20 ms still failed now and then: once a deadline passed
	// inside WithDeadlineCause (an expired-at-creation too many), once the
	// creation was seen 28 ms after the deadline was computed.
	flag.DurationVar(&cfg.budget, "budget", 400*time.Millisecond, "budget of the target's expiring deadlines")
	flag.DurationVar(&cfg.budgetSlack, "budget-slack", 40*time.Millisecond, "how far a measured budget may be off")
	timeout := flag.Duration("timeout", 150*time.Second, "give up on the remaining checks after this long")
	only := flag.String("checks", "", "run only these checks (comma-separated names; default all)")
	flag.Parse()

	out := newReporter(os.Stdout, *only)
	if pid1 {
		if os.Getenv(stageEnv) == "" {
			reexec(initSystem())
		}
		if msg := os.Getenv(initErrEnv); msg != "" {
			out.check("init", errors.New(msg), "")
		}
	}
	out.info(kernelRelease(), runtime.GOARCH)

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	runChecks(ctx, cfg, out)
	cancel()

	code := 0
	if out.failed {
		code = 1
	}
	fmt.Printf("\nKMATRIX-DONE exit=%d\n", code)
	if pid1 {
		powerOff()
	}
	os.Exit(code)
}

// config is what the checks need to know.
type config struct {
	bin         string
	rounds      int
	budget      time.Duration
	budgetSlack time.Duration
}

func (c config) prog(name string) string { return filepath.Join(c.bin, name) }

// runChecks runs every check in order; a check that cannot run fails. The
// rto checks use the collectors the attach checks started: loading them is
// most of a check's time on an emulated CPU.
func runChecks(ctx context.Context, cfg config, out *reporter) {
	if out.wants("preflight") {
		out.check("preflight", preflight(), "root, BTF")
	}
	for _, raw := range []bool{false, true} {
		rtoChecks(ctx, cfg, out, raw)
	}
	enrichChecks(ctx, cfg, out)
	for _, detail := range []bool{false, true} {
		name := "go_cold"
		if detail {
			name = "go_detail"
		}
		if out.wants(name) {
			msg, err := checkDeadlines(ctx, cfg, detail)
			out.check(name, err, msg)
		}
	}
	localChecks(out)
}
