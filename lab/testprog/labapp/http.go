package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
		withTLS  bool
		w        work
		timeoutH time.Duration
		outer    string
	)
	fs := flag.NewFlagSet("http-server", flag.ContinueOnError)
	fs.StringVar(&addr, "addr", ":8080", "listen address")
	fs.BoolVar(&withTLS, "tls", false,
		"serve HTTPS with a self-signed certificate made at start (HTTP/2 and HTTP/1.1 by ALPN, as net/http does)")
	fs.BoolVar(&withOTel, "otel", true,
		"wrap the handler in otelhttp.NewHandler; without it the trace ID is read from the traceparent header by hand")
	fs.DurationVar(&timeoutH, "timeout-handler", 0,
		"if > 0, wrap the whole handler (outermost, its ResponseWriter net/http's own) in http.TimeoutHandler with this timeout: the deadline is set by net/http, and the handler runs on a goroutine of its own")
	fs.StringVar(&outer, "outer-middleware", "",
		"with -timeout-handler: wrap it in third-party middleware that wraps its ResponseWriter: otelhttp (httpsnoop's wrapper), promhttp (a delegator), or both (promhttp inside otelhttp)")
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
	if timeoutH > 0 {
		h = http.TimeoutHandler(h, timeoutH, "timeout\n")
	}
	switch outer {
	case "":
	case "otelhttp", "promhttp", "both":
		if outer != "otelhttp" {
			served := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "labapp_requests_total", Help: "Requests served."}, []string{"code"})
			h = promhttp.InstrumentHandlerCounter(served, h)
		}
		if outer != "promhttp" {
			h = otelhttp.NewHandler(h, "labapp-outer")
		}
	default:
		return fmt.Errorf("-outer-middleware %q: want otelhttp, promhttp or both", outer)
	}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: h}
	if withTLS {
		cert, err := selfSigned()
		if err != nil {
			ln.Close()
			return err
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	served := make(chan error, 1)
	go func() {
		if withTLS {
			served <- srv.ServeTLS(ln, "", "") // HTTP/2 and HTTP/1.1 by ALPN
			return
		}
		served <- srv.Serve(ln)
	}()
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
	// first: the upload is part of the request. With -deadline-body it is
	// read under the handler's deadline.
	ctx, w := r.Context(), h.work
	var res workResult
	if w.bodyDeadline && w.deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.deadline)
		defer cancel()
		res.deadline, _ = ctx.Deadline()
		w.deadline = 0 // set already
	}
	_, err := io.Copy(io.Discard, r.Body)
	if (err == nil && ctx.Err() != nil) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The deadline passed while the body was read (the read itself
		// does not watch it; under http.TimeoutHandler the client may
		// also have given up on the upload once answered).
		err = ctx.Err()
		if res.deadline.IsZero() {
			res.deadline, _ = ctx.Deadline()
		}
	}
	if err == nil {
		dl := res.deadline
		res = w.do(ctx)
		if res.deadline.IsZero() {
			res.deadline = dl
		}
		err = res.err
	}
	line := serverLine{
		Side:       "server",
		Proto:      "http",
		TraceID:    traceID,
		SpanID:     spanID,
		Deadline:   deadlineText(res.deadline),
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

// selfSigned makes a throwaway ECDSA certificate for any name and address:
// clients of the lab skip its verification.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("TLS key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "labapp"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"labapp"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("TLS certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
