package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// runGRPCServer is the grpc-server subcommand: the unary method
// grpc.health.v1.Health/Check waits and answers SERVING, until ctx ends.
// The health service stands in for an application service because its
// messages need no code generation.
func runGRPCServer(ctx context.Context, args []string, out *lineWriter) error {
	var (
		addr     string
		withOTel bool
		withTLS  bool
		w        work
	)
	fs := flag.NewFlagSet("grpc-server", flag.ContinueOnError)
	fs.StringVar(&addr, "addr", ":9090", "listen address")
	fs.BoolVar(&withOTel, "otel", true,
		"trace with otelgrpc.NewServerHandler; without it the trace ID is read from the traceparent metadata by hand")
	fs.BoolVar(&withTLS, "tls", false, "serve over TLS with a self-signed certificate made at start")
	w.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}

	var opts []grpc.ServerOption
	if withTLS {
		cert, err := selfSigned()
		if err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(credentials.NewServerTLSFromCert(&cert)))
	}
	if withOTel {
		tel := newTelemetry()
		defer tel.shutdown(context.Background())
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(tel.provider), otelgrpc.WithPropagators(tel.propagator))))
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, &healthService{work: w, out: out})
	// Reflection, for clients that discover the method (grpcurl in the
	// real-program suite).
	reflection.Register(srv)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if err := out.line(fmt.Sprintf("ready %d %s", os.Getpid(), ln.Addr())); err != nil {
		srv.Stop()
		return err
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(shutdownGrace):
		srv.Stop()
	}
	return nil
}

// healthService implements Health/Check as the lab's unary method.
type healthService struct {
	healthpb.UnimplementedHealthServer
	work work
	out  *lineWriter
}

// Check runs the work under the RPC's context (which carries the client's
// deadline from grpc-timeout) and logs one serverLine.
func (s *healthService) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	start := time.Now()
	var traceparent string
	if v := metadata.ValueFromIncomingContext(ctx, "traceparent"); len(v) > 0 {
		traceparent = v[0]
	}
	traceID, spanID := requestTrace(ctx, traceparent)
	res := s.work.do(ctx)
	err := res.err
	line := serverLine{
		Side:       "server",
		Proto:      "grpc",
		TraceID:    traceID,
		SpanID:     spanID,
		Deadline:   deadlineText(res.deadline),
		Outcome:    serverOutcome(err),
		Error:      errorText(err),
		DurationMS: millis(time.Since(start)),
	}
	if err := s.out.json(line); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}
