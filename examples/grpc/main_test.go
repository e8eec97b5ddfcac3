package main

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/internal/redistest"
)

// serve runs the example on a free loopback port and returns a health client.
func serve(t *testing.T, redisURL, keyPrefix string) healthpb.HealthClient {
	c, _ := serveWithMetrics(t, redisURL, keyPrefix)
	return c
}

// serveWithMetrics is serve, also returning the base URL of /metrics and
// /debug/ratelimit.
func serveWithMetrics(t *testing.T, redisURL, keyPrefix string) (healthpb.HealthClient, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc, metricsc := make(chan net.Addr, 1), make(chan net.Addr, 1)
	done := make(chan error, 1)
	o := options{addr: "127.0.0.1:0", redisURL: redisURL, keyPrefix: keyPrefix, ready: func(a net.Addr) { addrc <- a },
		metricsAddr: "127.0.0.1:0", metricsReady: func(a net.Addr) { metricsc <- a }}
	go func() { done <- run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn), "http://" + (<-metricsc).String()
}

// fiveThenBlocked makes six calls: five pass, the sixth is rate limited.
func fiveThenBlocked(t *testing.T, c healthpb.HealthClient) {
	t.Helper()
	for i := 1; i <= 6; i++ {
		resp, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if i <= 5 {
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("call %d: %v, %v; want SERVING", i, resp, err)
			}
			continue
		}
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted {
			t.Fatalf("call 6: %v, want ResourceExhausted", err)
		}
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				if d := ri.GetRetryDelay().AsDuration(); d < 55*time.Second || d > time.Minute {
					t.Fatalf("RetryInfo %v, want about a minute", d)
				}
				return
			}
		}
		t.Fatalf("call 6: no RetryInfo in %v", st.Details())
	}
}

func TestMemory(t *testing.T) {
	c, metrics := serveWithMetrics(t, "", "")
	fiveThenBlocked(t, c)
	exampleutil.Observed(t, metrics, "grpc_request", "per_peer")
}

func TestRedis(t *testing.T) {
	url := redistest.URL(t)
	fiveThenBlocked(t, serve(t, url, redistest.Prefix(t)))

	// Two replicas on one Redis share the limit: the client's five calls are
	// spent on the first, so its sixth call on the second is blocked.
	prefix := redistest.Prefix(t)
	a, b := serve(t, url, prefix), serve(t, url, prefix)
	for i := 0; i < 5; i++ {
		if _, err := a.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d on replica a: %v", i+1, err)
		}
	}
	if _, err := b.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("sixth call on replica b: %v, want ResourceExhausted", err)
	}
}

func TestBadRedisURL(t *testing.T) {
	if err := run(context.Background(), options{addr: "127.0.0.1:0", redisURL: "not a url"}); err == nil {
		t.Fatal("run accepted a bad REDIS_URL")
	}
}
