// Command labapp is the lab application that the tracer's tests run against:
// an HTTP server, a gRPC server and a client, instrumented with otelhttp,
// otelgrpc and the OTel SDK, whose per-request timeouts, server delays,
// concurrency and span placement come from flags. Every request is logged
// as one JSON line on stdout (trace ID, outcome, error): the ground truth a
// test compares the tracer's reports with.
//
// Spans live in memory only: the SDK tracer provider has no exporter, so
// nothing leaves the machine.
//
//	labapp http-server -addr :8080 -delay 0 [-delay-jitter 0] [-deadline 0] [-otel=true]
//	labapp grpc-server -addr :9090 -delay 0 [-delay-jitter 0] [-deadline 0] [-otel=true]
//	labapp client -proto http|grpc -target ADDR -n N -concurrency C -timeout T
//	       -span before|inside|none [-otel=true] [-path /work] [-traceparent TP] [-wait]
//	labapp load [-workers 8] [-timeout 1s]   (overhead benchmarks; phases on stdin)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: labapp http-server|grpc-server|client|load [flags]
run "labapp SUBCOMMAND -h" for the flags of one subcommand`

func main() {
	os.Exit(run(os.Args[1:]))
}

// run dispatches to a subcommand and returns the process exit code.
func run(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := newLineWriter(os.Stdout)

	var err error
	switch args[0] {
	case "http-server":
		err = runHTTPServer(ctx, args[1:], out)
	case "grpc-server":
		err = runGRPCServer(ctx, args[1:], out)
	case "client":
		err = runClient(ctx, args[1:], os.Stdin, out)
	case "load":
		err = runLoad(ctx, args[1:], os.Stdin, os.Stdout)
	default:
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 2
	case err != nil:
		fmt.Fprintf(os.Stderr, "labapp %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
