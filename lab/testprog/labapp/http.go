package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
)

// shutdownGrace bounds how long a server waits for handlers in flight when
// it is told to stop.
const shutdownGrace = 5 * time.Second

// runHTTPServer is the http-server subcommand: GET (or POST) /work waits and answers
// "ok", until ctx ends.
func runHTTPServer(ctx context.Context, args []string, out *lineWriter) error {
	var (
		addr     string
		withOTel bool
		w        work
	)
	fs := flag.NewFlagSet("http-server", flag.ContinueOnError)
	fs.StringVar(&addr, "addr", ":8080", "listen address")
	fs.BoolVar(&withOTel, "otel", true,
		"wrap the handler in otelhttp.NewHandler; without it the trace ID is read from the traceparent header by hand")
	w.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/work", &workHandler{work: w, out: out}) // GET, or POST with a bulk body (client -req-bytes)
	var h http.Handler = mux
	if withOTel {
		tel := newTelemetry()
		defer tel.shutdown(context.Background())
		h = otelhttp.NewHandler(mux, "labapp-server",
			otelhttp.WithTracerProvider(tel.provider), otelhttp.WithPropagators(tel.propagator))
	}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: h}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if err := out.line(fmt.Sprintf("ready %d %s", os.Getpid(), ln.Addr())); err != nil {
		srv.Close()
		return err
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return errors.Join(fmt.Errorf("shut down: %w", err), srv.Close())
	}
	return nil
}

// workHandler serves /work: it runs the work under the request's context
// and logs one serverLine.
type workHandler struct {
	work work
	out  *lineWriter
}

// ServeHTTP answers 200 "ok", 504 when the handler's own deadline expired,
// and 503 when the client went away (nobody reads that).
func (h *workHandler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	start := time.Now()
	traceID, spanID := requestTrace(r.Context(), r.Header.Get("traceparent"))
	// A request body (the client's -req-bytes upload) is read in full
	// first: the upload is part of the request.
	_, err := io.Copy(io.Discard, r.Body)
	if err == nil {
		err = h.work.do(r.Context())
	}
	line := serverLine{
		Side:       "server",
		Proto:      "http",
		TraceID:    traceID,
		SpanID:     spanID,
		Outcome:    serverOutcome(err),
		Error:      errorText(err),
		DurationMS: millis(time.Since(start)),
	}
	switch line.Outcome {
	case outcomeOK:
		io.WriteString(rw, "ok")
	case outcomeDeadlineExceeded:
		http.Error(rw, err.Error(), http.StatusGatewayTimeout)
	default:
		http.Error(rw, err.Error(), http.StatusServiceUnavailable)
	}
	if err := h.out.json(line); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}
