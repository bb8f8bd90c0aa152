package main

import (
	"context"
	"crypto/tls"
	"fmt"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// grpcCaller calls Health/Check over one connection; with stall
// (-proto grpc-stall) it opens the server's reflection stream instead and
// sends nothing: a client that does not send its request, the server
// waiting for it until the deadline the client propagated (grpc-timeout).
type grpcCaller struct {
	conn        *grpc.ClientConn
	health      healthpb.HealthClient
	traceparent string
	stall       bool
}

// newGRPCCaller builds the client: plaintext (or TLS, -tls), never through a proxy, and
// with OTel otelgrpc's stats handler followed by captureHandler. It starts
// connecting at once so that the first request is not charged for it.
func newGRPCCaller(cfg clientConfig, tel *telemetry) (*grpcCaller, error) {
	creds := insecure.NewCredentials()
	if cfg.tls {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithNoProxy(),
	}
	if cfg.otel {
		opts = append(opts,
			grpc.WithStatsHandler(otelgrpc.NewClientHandler(
				otelgrpc.WithTracerProvider(tel.provider), otelgrpc.WithPropagators(tel.propagator))),
			grpc.WithStatsHandler(captureHandler{}))
	}
	conn, err := grpc.NewClient(cfg.target, opts...)
	if err != nil {
		return nil, fmt.Errorf("create gRPC client for %s: %w", cfg.target, err)
	}
	conn.Connect()
	return &grpcCaller{conn: conn, health: healthpb.NewHealthClient(conn), traceparent: cfg.traceparent, stall: cfg.proto == "grpc-stall"}, nil
}

// call sends one Check.
func (c *grpcCaller) call(ctx context.Context) error {
	if c.traceparent != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", c.traceparent)
	}
	if c.stall {
		st, err := reflectionpb.NewServerReflectionClient(c.conn).ServerReflectionInfo(ctx)
		if err != nil {
			return err
		}
		_, err = st.Recv() // nothing sent: the server waits for the request
		return err
	}
	_, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// close closes the connection.
func (c *grpcCaller) close() error {
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("close gRPC connection: %w", err)
	}
	return nil
}
