package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/timeout-tracer/tracer/pipeline"
	"github.com/timeout-tracer/tracer/pipeline/adaptive"
	"github.com/timeout-tracer/tracer/pipeline/storm"
	"github.com/timeout-tracer/tracer/workload"
)

// targetFlags are the flags of the commands that attach to one Go process
// (trace, record): which process, for how long, and the detail tier.
type targetFlags struct {
	pid      int
	duration time.Duration
	detail   string
	policy   adaptive.Policy
	local    pipeline.LocalConfig
	storm    storm.Policy
}

func (f *targetFlags) bind(fl *pflag.FlagSet, verb string) {
	f.policy = adaptive.DefaultPolicy()
	fl.IntVar(&f.pid, "pid", 0, "process to "+verb+" (required)")
	fl.DurationVar(&f.duration, "duration", 0, "stop after this long (default: until interrupted or the process exits)")
	fl.StringVar(&f.detail, "detail", "auto", "detail probes: auto, always or never")
	fl.IntVar(&f.policy.Threshold, "detail-threshold", f.policy.Threshold, "auto: expiries within --detail-window that attach detail")
	fl.DurationVar(&f.policy.Window, "detail-window", f.policy.Window, "auto: window for --detail-threshold")
	fl.DurationVar(&f.policy.Quiet, "detail-quiet", f.policy.Quiet, "auto: detach detail after this long without an expiry")
	fl.StringVar(&f.local.Mode, "local", "auto", "local causes (CPU throttling, run-queue delay, GC pauses): auto (the scheduler hooks only with the detail tier), always or never")
	fl.StringVar(&f.local.CgroupRoot, "cgroup-root", "/sys/fs/cgroup", "where the cgroup filesystems are mounted (a node agent: the host's, e.g. /host/sys/fs/cgroup)")
	f.storm = storm.DefaultPolicy()
	fl.Uint64Var(&f.storm.MaxHitsPerSec, "storm-max-hits", f.storm.MaxHitsPerSec, "storm guard: probe hits per second above which every probe is detached for --storm-cooldown (0: never)")
	fl.DurationVar(&f.storm.Cooldown, "storm-cooldown", f.storm.Cooldown, "storm guard: how long probes stay detached after a storm trips the guard")
}

// start validates the flags, checks the process exists, and returns a
// context bounded by --duration and a channel closed when the process exits.
func (f *targetFlags) start(ctx context.Context, verb string) (context.Context, context.CancelFunc, <-chan struct{}, error) {
	if !contains(detailModes, f.detail) {
		return nil, nil, nil, fmt.Errorf("unknown --detail %q: use auto, always or never", f.detail)
	}
	if !contains(pipeline.LocalModes, f.local.Mode) {
		return nil, nil, nil, fmt.Errorf("unknown --local %q: use auto, always or never", f.local.Mode)
	}
	if err := f.policy.Validate(); err != nil {
		return nil, nil, nil, err
	}
	if err := f.storm.Validate(); err != nil {
		return nil, nil, nil, err
	}
	if f.pid <= 0 {
		return nil, nil, nil, errors.New("--pid is required: the process to " + verb)
	}
	exited, err := workload.WatchExit(f.pid)
	if err != nil {
		return nil, nil, nil, err
	}
	cancel := context.CancelFunc(func() {})
	if f.duration > 0 {
		ctx, cancel = context.WithTimeout(ctx, f.duration)
	}
	return ctx, cancel, exited, nil
}
