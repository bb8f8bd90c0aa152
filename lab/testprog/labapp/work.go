package main

import (
	"context"
	"errors"
	"flag"
	"math/rand/v2"
	"time"
)

// work is what a server does per request: wait, possibly under a deadline
// of its own.
type work struct {
	delay    time.Duration
	jitter   time.Duration
	deadline time.Duration
	spawn    bool
}

// bind registers the work flags, shared by both servers, on fs.
func (w *work) bind(fs *flag.FlagSet) {
	fs.DurationVar(&w.delay, "delay", 0, "how long the handler waits before answering")
	fs.DurationVar(&w.jitter, "delay-jitter", 0, "a random extra wait in [0, jitter) per request")
	fs.DurationVar(&w.deadline, "deadline", 0,
		"if > 0, the handler waits under context.WithTimeout(request context, deadline): a server-side deadline")
	fs.BoolVar(&w.spawn, "spawn", false,
		"run the work (and its -deadline) on a goroutine the handler starts, and wait for it: a deadline set off the serving goroutine")
}

// do waits for the delay, stopping early when ctx (or the handler's own
// deadline under it) ends; it returns that context's error.
func (w work) do(ctx context.Context) error {
	if w.spawn {
		done := make(chan error, 1)
		go func() {
			w.spawn = false
			done <- w.do(ctx)
		}()
		return <-done
	}
	if w.deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.deadline)
		defer cancel()
	}
	d := w.delay
	if w.jitter > 0 {
		d += rand.N(w.jitter)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serverOutcome classifies the result of work.do.
func serverOutcome(err error) string {
	switch {
	case err == nil:
		return outcomeOK
	case errors.Is(err, context.DeadlineExceeded):
		return outcomeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return outcomeCanceled
	default:
		return outcomeError
	}
}
