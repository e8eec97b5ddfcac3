package main

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/internal/redistest"
)

// serve runs the example on a free loopback port and returns a connection.
func serve(t *testing.T, redisURL, keyPrefix string) *grpc.ClientConn {
	c, _ := serveWithMetrics(t, redisURL, keyPrefix)
	return c
}

// serveWithMetrics is serve, also returning the base URL of /metrics and
// /debug/ratelimit.
func serveWithMetrics(t *testing.T, redisURL, keyPrefix string) (*grpc.ClientConn, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc, metricsc := make(chan net.Addr, 1), make(chan net.Addr, 1)
	done := make(chan error, 1)
	o := options{addr: "127.0.0.1:0", redisURL: redisURL, keyPrefix: keyPrefix, checkTimeout: exampleutil.TestCheckTimeout,
		ready:       func(a net.Addr) { addrc <- a },
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
	return conn, "http://" + (<-metricsc).String()
}

// hello calls Greeter/SayHello as grpcurl -d '"ratekit"' does.
func hello(conn *grpc.ClientConn) (string, error) {
	out := new(wrapperspb.StringValue)
	err := conn.Invoke(context.Background(), sayHello, wrapperspb.String("ratekit"), out)
	return out.GetValue(), err
}

// fiveThenBlocked makes six calls: five pass, the sixth is rate limited.
func fiveThenBlocked(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	start := time.Now() // the window starts after it
	for i := 1; i <= 6; i++ {
		got, err := hello(conn)
		if i <= 5 {
			if err != nil || got != "hello ratekit" {
				t.Fatalf("call %d: %q, %v; want hello ratekit", i, got, err)
			}
			continue
		}
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted {
			t.Fatalf("call 6: %v, want ResourceExhausted", err)
		}
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				// In whole seconds, rounded up: at most the window, less
				// at most the real time the calls took.
				elapsed := time.Since(start)
				if d := ri.GetRetryDelay().AsDuration(); d < time.Minute-elapsed-time.Second || d > time.Minute {
					t.Fatalf("RetryInfo %v, want a minute less at most the calls' %v", d, elapsed)
				}
				return
			}
		}
		t.Fatalf("call 6: no RetryInfo in %v", st.Details())
	}
}

// healthAlwaysServes checks that health checks pass although the caller is
// over its limit: the skip rule.
func healthAlwaysServes(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	c := healthpb.NewHealthClient(conn)
	for i := 1; i <= 10; i++ {
		resp, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health check %d over the limit: %v, %v; want SERVING", i, resp, err)
		}
	}
}

func TestMemory(t *testing.T) {
	conn, metrics := serveWithMetrics(t, "", "")
	fiveThenBlocked(t, conn)
	exampleutil.Observed(t, metrics, "grpc_request", "per_peer")
	exampleutil.HeadersBounded(t, metrics)
	healthAlwaysServes(t, conn)
}

// What grpcurl does with the README's commands, through the reflection
// service: list the services, fetch the file declaring Greeter and its
// dependency, and find SayHello's types there. Repeated past the limit:
// reflection is never limited either.
func TestReflection(t *testing.T) {
	conn := serve(t, "", "")
	fiveThenBlocked(t, conn)
	for range 3 {
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ask := func(req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
			t.Helper()
			if err := stream.Send(req); err != nil {
				t.Fatal(err)
			}
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("reflection: %v", err)
			}
			if e := resp.GetErrorResponse(); e != nil {
				t.Fatalf("reflection %v: %s", req, e.GetErrorMessage())
			}
			return resp
		}

		var services []string
		for _, s := range ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}).GetListServicesResponse().GetService() {
			services = append(services, s.GetName())
		}
		for _, want := range []string{greeterService, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
			if !slices.Contains(services, want) {
				t.Errorf("list: %v lacks %s", services, want)
			}
		}

		files := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
			FileContainingSymbol: greeterService}}).GetFileDescriptorResponse().GetFileDescriptorProto()
		var method *descriptorpb.MethodDescriptorProto
		var deps []string
		for _, b := range files {
			fd := new(descriptorpb.FileDescriptorProto)
			if err := proto.Unmarshal(b, fd); err != nil {
				t.Fatal(err)
			}
			if fd.GetName() != greeterFile {
				continue
			}
			deps = fd.GetDependency()
			for _, s := range fd.GetService() {
				for _, m := range s.GetMethod() {
					if s.GetName() == "Greeter" && m.GetName() == "SayHello" {
						method = m
					}
				}
			}
		}
		if method == nil || method.GetInputType() != ".google.protobuf.StringValue" || method.GetOutputType() != ".google.protobuf.StringValue" {
			t.Fatalf("reflection describes SayHello as %v", method)
		}
		for _, dep := range deps {
			if got := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileByFilename{
				FileByFilename: dep}}).GetFileDescriptorResponse().GetFileDescriptorProto(); len(got) == 0 {
				t.Errorf("reflection has no %s", dep)
			}
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("reflection stream end: %v", err)
		}
	}
	healthAlwaysServes(t, conn)
}

func TestRedis(t *testing.T) {
	url := redistest.URL(t)
	fiveThenBlocked(t, serve(t, url, redistest.Prefix(t)))

	// Two replicas on one Redis share the limit: the client's five calls are
	// spent on the first, so its sixth call on the second is blocked.
	prefix := redistest.Prefix(t)
	a, b := serve(t, url, prefix), serve(t, url, prefix)
	for i := 0; i < 5; i++ {
		if _, err := hello(a); err != nil {
			t.Fatalf("call %d on replica a: %v", i+1, err)
		}
	}
	if _, err := hello(b); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("sixth call on replica b: %v, want ResourceExhausted", err)
	}
	healthAlwaysServes(t, b)
}

func TestBadRedisURL(t *testing.T) {
	if err := run(context.Background(), options{addr: "127.0.0.1:0", redisURL: "not a url"}); err == nil {
		t.Fatal("run accepted a bad REDIS_URL")
	}
}
