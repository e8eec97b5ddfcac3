// The gRPC example: ratekit.example.v1.Greeter/SayHello, limited to 5 calls
// per minute per client IP by ratelimitgrpc interceptors. The sixth call within
// a minute fails with RESOURCE_EXHAUSTED and RetryInfo. Health checks
// (grpc.health.v1.Health) are never limited: a skip rule matches them, as a
// service's load balancer must always get an answer. The server serves
// reflection (skipped as well), so grpcurl needs no .proto file.
//
//	go run ./examples/grpc -addr localhost:50051                                # embedded in-memory store
//	REDIS_URL=redis://127.0.0.1:6379 go run ./examples/grpc -addr localhost:50051  # Redis, shared by every replica
//
// Try it with grpcurl (metadata printed with -v):
//
//	grpcurl -plaintext localhost:50051 list
//	grpcurl -plaintext -v -d '"ratekit"' localhost:50051 ratekit.example.v1.Greeter/SayHello
//	grpcurl -plaintext localhost:50051 grpc.health.v1.Health/Check   # never limited
//
// /metrics and /debug/ratelimit are on -metrics-addr (default localhost:9103),
// never on the gRPC port. With OTEL_EXPORTER_OTLP_ENDPOINT set, checks are
// also spans and the metrics are pushed over OTLP/HTTP.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/httpguard"
	ratelimitgrpc "github.com/ratekit/ratekit/middleware/grpc"
)

func main() {
	addr := flag.String("addr", "localhost:50051", "listen address")
	metricsAddr := flag.String("metrics-addr", "localhost:9103", `HTTP address of /metrics and /debug/ratelimit ("" for none)`)
	var checkTimeout time.Duration
	exampleutil.CheckTimeoutFlag(&checkTimeout)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, options{addr: *addr, metricsAddr: *metricsAddr, redisURL: os.Getenv("REDIS_URL"), checkTimeout: checkTimeout}); err != nil {
		log.Fatal(err)
	}
}

type options struct {
	addr      string
	redisURL  string         // "" for the embedded store
	keyPrefix string         // counter key prefix ("" for the default)
	ready     func(net.Addr) // told the bound address (tests)

	checkTimeout time.Duration // bounds each check on Redis before it fails open (0 for ratelimit.DefaultTimeout; -check-timeout)

	metricsAddr  string         // HTTP address of /metrics and /debug/ratelimit ("" for none)
	metricsReady func(net.Addr) // told its bound address (tests)
}

// run serves until ctx ends.
func run(ctx context.Context, o options) error {
	// The embedded store, or redisstore.Dial(ctx, url) when REDIS_URL is set (the
	// helper every example shares).
	store, what, closeStore, err := exampleutil.NewStore(ctx, o.redisURL)
	if err != nil {
		return err
	}
	defer closeStore()
	obs := exampleutil.NewObservability()
	// OpenTelemetry traces and metrics when OTEL_EXPORTER_OTLP_ENDPOINT is set.
	stopOTel, err := obs.StartOTel(ctx, "ratekit_example_grpc")
	if err != nil {
		return err
	}
	defer func() { _ = stopOTel(context.Background()) }()
	srv, limiter, err := newServer(store, o.keyPrefix, o.checkTimeout, obs.Observer())
	if err != nil {
		return err
	}
	if o.metricsAddr != "" {
		stop, err := serveObservability(ctx, o, obs, limiter)
		if err != nil {
			return err
		}
		defer stop()
	}
	lis, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.addr, err)
	}
	log.Printf("%s on %s, 5 calls per minute per client IP (health checks never limited), store: %s", greeterService, lis.Addr(), what)
	if o.ready != nil {
		o.ready(lis.Addr())
	}
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// newServer returns a gRPC server with the Greeter, the health service and
// reflection behind the rate-limit interceptors; checkTimeout bounds each
// check on Redis (0 for ratelimit.DefaultTimeout).
func newServer(store ratelimit.Store, keyPrefix string, checkTimeout time.Duration, obs func(context.Context, ratelimit.Event)) (*grpc.Server, *ratelimit.Limiter, error) {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:      "grpc_request",
		Store:     store,
		KeyPrefix: cmp.Or(keyPrefix, exampleutil.KeyPrefix), // `ratekit --service examples`
		Timeout:   checkTimeout,
		Observer:  obs,
		Rules: []ratelimit.Rule{{
			// A load balancer's health checks must always get an answer, and
			// grpcurl's reflection stream should not spend the caller's calls.
			Name:        "skip_health_and_reflection",
			Description: "Health checks and reflection are never limited",
			Action:      ratelimit.ActionSkip,
			Match: map[string]ratelimit.Matcher{identifiers.GRPCService: ratelimit.OneOf(
				healthpb.Health_ServiceDesc.ServiceName, "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection")},
		}, {
			Name:            "per_peer",
			Description:     "5 calls per minute per client IP",
			Characteristics: []string{identifiers.IP},
			Limit:           5,
			Period:          time.Minute,
		}},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("limiter: %w", err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(limiter)),
		grpc.ChainStreamInterceptor(ratelimitgrpc.StreamServerInterceptor(limiter)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	srv.RegisterService(&greeterDesc, struct{}{})
	reflection.Register(srv)
	return srv, limiter, nil
}

// serveObservability serves /metrics and /debug/ratelimit on o.metricsAddr
// until ctx ends or stop is called.
func serveObservability(ctx context.Context, o options, obs *exampleutil.Observability, limiter *ratelimit.Limiter) (stop func(), err error) {
	lis, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", o.metricsAddr, err)
	}
	mux := http.NewServeMux()
	obs.Mount(mux, limiter)
	srv := httpguard.Server(mux) // timeouts and a header bound, as every ratekit listener
	log.Printf("metrics at http://%s/metrics, debug page at http://%s/debug/ratelimit", lis.Addr(), lis.Addr())
	if o.metricsReady != nil {
		o.metricsReady(lis.Addr())
	}
	go func() { _ = srv.Serve(lis) }()
	go obs.Run(ctx)
	return func() { _ = srv.Close() }, nil
}
