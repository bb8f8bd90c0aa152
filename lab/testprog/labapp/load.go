package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
)

// runLoad is the instrumented lab service for overhead benchmarks: an
// otelhttp server and client in one process, each request under a span
// opened before its context.WithTimeout (met), at saturation. For each
// line "run DURATION" on stdin it runs the load for that long and prints
// "requests CPU_NANOSECONDS" (user+system time of the process, where uprobe
// traps are charged).
func runLoad(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	workers := fs.Int("workers", 8, "concurrent clients")
	timeout := fs.Duration("timeout", time.Second, "per-request timeout (met)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tel := newTelemetry()
	defer tel.shutdown(context.Background())
	tp, prop := tel.provider, tel.propagator
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	h := otelhttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		"load-server", otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(prop))
	go (&http.Server{Handler: h}).Serve(ln)
	url := "http://" + ln.Addr().String() + "/"
	client := &http.Client{Transport: otelhttp.NewTransport(&http.Transport{MaxIdleConnsPerHost: *workers, Proxy: nil},
		otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(prop))}
	tracer := tel.tracer()

	fmt.Fprintln(stdout, "ready", syscall.Getpid())
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		arg, ok := strings.CutPrefix(sc.Text(), "run ")
		if !ok {
			continue
		}
		d, err := time.ParseDuration(arg)
		if err != nil {
			return fmt.Errorf("parse %q: %w", sc.Text(), err)
		}
		var n atomic.Int64
		var wg sync.WaitGroup
		c0 := cpuNanos()
		end := time.Now().Add(d)
		for i := 0; i < *workers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) && ctx.Err() == nil {
					sctx, span := tracer.Start(ctx, "request")
					rctx, cancel := context.WithTimeout(sctx, *timeout)
					req, _ := http.NewRequestWithContext(rctx, "GET", url, nil)
					if resp, err := client.Do(req); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						n.Add(1)
					}
					cancel()
					span.End()
				}
			}()
		}
		wg.Wait()
		fmt.Fprintln(stdout, n.Load(), cpuNanos()-c0)
	}
	return sc.Err()
}

func cpuNanos() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
