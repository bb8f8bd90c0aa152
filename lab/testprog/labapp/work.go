package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// work is what a server does per request: wait, possibly under a deadline
// of its own.
type work struct {
	delay    time.Duration
	jitter   time.Duration
	deadline time.Duration
	spawn    bool
	// upstream (-upstream): the work is a GET of this URL under the
	// request's context (and -deadline), on one client shared by every
	// request: a proxy-like server whose deadline covers a call it makes.
	upstream string
	client   *http.Client
	// bodyDeadline (-deadline-body): the handler's -deadline is set before
	// it reads the request body, which it reads under it (the read itself
	// does not watch the context, as io.ReadAll(r.Body) does not).
	bodyDeadline bool
	// pool (-pool): the work runs on this many long-lived goroutines,
	// started by the first request that needs one (sync.Once), each doing
	// request after request; shared by every copy of the work.
	pool *workPool
}

// workPool is -pool's: goroutines started lazily inside a request, which
// outlive it (they inherit its traceparent, then serve other requests).
type workPool struct {
	n    int
	once sync.Once
	jobs chan poolJob
}

type poolJob struct {
	ctx  context.Context
	done chan workResult
}

// workResult is what one request's work did: its own deadline, if any, and
// the error that ended it.
type workResult struct {
	deadline time.Time
	err      error
}

// bind registers the work flags, shared by both servers, on fs.
func (w *work) bind(fs *flag.FlagSet) {
	fs.DurationVar(&w.delay, "delay", 0, "how long the handler waits before answering")
	fs.DurationVar(&w.jitter, "delay-jitter", 0, "a random extra wait in [0, jitter) per request")
	fs.DurationVar(&w.deadline, "deadline", 0,
		"if > 0, the handler waits under context.WithTimeout(request context, deadline): a server-side deadline")
	fs.BoolVar(&w.spawn, "spawn", false,
		"run the work (and its -deadline) on a goroutine the handler starts, and wait for it: a deadline set off the serving goroutine")
	fs.BoolVar(&w.bodyDeadline, "deadline-body", false,
		"set the -deadline before reading the request body (HTTP), so that the body is read under it: a client that stalls its upload makes it expire")
	fs.StringVar(&w.upstream, "upstream", "",
		"instead of waiting, GET this URL under the request's context (and -deadline), on a keep-alive client shared by all requests: a proxy-like server")
	w.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	w.pool = &workPool{}
	fs.IntVar(&w.pool.n, "pool", 0,
		"run the work (and its -deadline, under the request's context) on this many worker goroutines the first request starts and every later one reuses (0: on the handler's goroutine)")
}

// do waits for the delay, stopping early when ctx (or the handler's own
// deadline under it) ends; it returns that context's error.
func (w work) do(ctx context.Context) workResult {
	if w.spawn {
		done := make(chan workResult, 1)
		go func() {
			w.spawn = false
			done <- w.do(ctx)
		}()
		return <-done
	}
	if p := w.pool; p != nil && p.n > 0 {
		p.once.Do(func() {
			p.jobs = make(chan poolJob)
			inline := w
			inline.pool = nil
			for range p.n {
				go func() {
					for j := range p.jobs {
						j.done <- inline.do(j.ctx)
					}
				}()
			}
		})
		done := make(chan workResult, 1)
		p.jobs <- poolJob{ctx: ctx, done: done}
		return <-done
	}
	var res workResult
	if w.deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.deadline)
		defer cancel()
		res.deadline, _ = ctx.Deadline()
	}
	if w.upstream != "" {
		res.err = w.callUpstream(ctx)
		return res
	}
	d := w.delay
	if w.jitter > 0 {
		d += rand.N(w.jitter)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		res.err = ctx.Err()
	}
	return res
}

// callUpstream GETs the upstream URL under ctx and reads the answer.
func (w work) callUpstream(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.upstream, nil)
	if err != nil {
		return err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("upstream: %s", resp.Status)
	}
	return nil
}

// deadlineText is a deadline as the lines log it: RFC 3339, UTC, to the
// nanosecond; "" for none.
func deadlineText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
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
