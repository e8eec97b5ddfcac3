package ratelimitgrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	ratelimitgrpc "github.com/ratekit/ratekit/middleware/grpc"
)

// A health service limited to 2 calls per minute per client IP, served on
// loopback and called three times.
func ExampleUnaryServerInterceptor() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "grpc_request",
		Store: ratelimit.NewMemoryStore(), // redisstore.New(client) for a fleet
		Rules: []ratelimit.Rule{{
			Name:            "per_peer",
			Characteristics: []string{identifiers.IP},
			Limit:           2,
			Period:          time.Minute,
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(limiter)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		var md metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		st := status.Convert(err)
		fmt.Println(st.Code(), strings.Split(md.Get(ratelimitgrpc.MetadataRateLimit)[0], ";t=")[0]) // t= is the seconds to the reset
		for _, d := range st.Details() {
			if ei, ok := d.(*errdetails.ErrorInfo); ok {
				fmt.Println(ei.GetReason(), ei.GetMetadata()["limiter"], ei.GetMetadata()["rule"])
			}
		}
	}
	// Output:
	// OK "per_peer";r=1
	// OK "per_peer";r=0
	// ResourceExhausted "per_peer";r=0
	// RATE_LIMITED grpc_request per_peer
}

// Two limiters, health checks exempt, the user from an auth interceptor, and
// a database-time budget charged after each call.
func ExampleWithLimiters() {
	newLimiter := func(name string, rules ...ratelimit.Rule) *ratelimit.Limiter {
		l, err := ratelimit.New(ratelimit.Config{Name: name, Store: ratelimit.NewMemoryStore(), Rules: rules})
		if err != nil {
			log.Fatal(err)
		}
		return l
	}
	// Signed-in callers by user; the others by IP: per user alone, every
	// anonymous caller would share the bucket of user "<anonymous>".
	general := newLimiter("grpc_request",
		ratelimit.Rule{Name: "per_anonymous_ip", Match: map[string]ratelimit.Matcher{identifiers.User: ratelimit.Equal(identifiers.Anonymous)},
			Characteristics: []string{identifiers.IP}, Limit: 60, Period: time.Minute},
		ratelimit.Rule{Name: "per_user", Match: map[string]ratelimit.Matcher{identifiers.User: ratelimit.Regex("^user:")},
			Characteristics: []string{identifiers.User}, Limit: 600, Period: time.Minute})
	protected := newLimiter("grpc_protected", ratelimit.Rule{Name: "signup_per_ip",
		Match:           map[string]ratelimit.Matcher{identifiers.GRPCMethod: ratelimit.Equal("/acme.Accounts/SignUp")},
		Characteristics: []string{identifiers.IP}, Limit: 10, Period: time.Hour})
	db := newLimiter("db_utilization", ratelimit.Rule{Name: "db_seconds_per_user", Characteristics: []string{identifiers.User},
		Limit: 300, Period: time.Minute})

	interceptor := ratelimitgrpc.UnaryServerInterceptor(general,
		ratelimitgrpc.WithLimiters(protected),
		// Every method of the health service: Check, List and Watch.
		ratelimitgrpc.WithSkip(func(_ context.Context, call *ratelimitgrpc.Call) bool {
			return call.Service == healthpb.Health_ServiceDesc.ServiceName
		}),
		ratelimitgrpc.WithTrustedProxies(identifiers.MustParseTrustedProxies("10.0.0.0/8")),
		ratelimitgrpc.WithProperties(func(ctx context.Context, _ *ratelimitgrpc.Call, id ratelimit.Identifier) {
			if user, ok := ctx.Value(userKey{}).(string); ok { // set by the auth interceptor
				id[identifiers.User] = "user:" + user
			}
		}),
		// The handlers' database layer calls adapter.AddCost(ctx, "db_s", seconds).
		ratelimitgrpc.WithDeferred(ratelimitgrpc.Metered(db, "db_s")),
		ratelimitgrpc.WithDomain("api.example.com"),
	)
	_ = grpc.NewServer(grpc.ChainUnaryInterceptor(authInterceptor, interceptor))
	fmt.Println("configured")
	// Output: configured
}

type userKey struct{}

func authInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-user")) == 1 {
		ctx = context.WithValue(ctx, userKey{}, md.Get("x-user")[0])
	}
	return handler(ctx, req)
}

// Failed logins only: the third attempt after two Unauthenticated replies is
// rejected before the handler runs.
func ExampleCountCodes() {
	failures, err := ratelimit.New(ratelimit.Config{Name: "login_failures", Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "per_ip", Characteristics: []string{identifiers.IP},
			Limit: 2, Period: time.Minute}}})
	if err != nil {
		log.Fatal(err)
	}
	// No request limiter: the limiter may be nil when an option gives one.
	ic := ratelimitgrpc.UnaryServerInterceptor(nil,
		ratelimitgrpc.WithDeferred(ratelimitgrpc.CountCodes(failures, codes.Unauthenticated)))
	login := func(context.Context, any) (any, error) {
		return nil, status.Error(codes.Unauthenticated, "bad password")
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/acme.Auth/Login"}
	// the client's address, as a real server puts it in the context
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 50000}})
	for range 3 {
		_, err := ic(ctx, nil, info, login)
		fmt.Println(status.Code(err))
	}
	// Output:
	// Unauthenticated
	// Unauthenticated
	// ResourceExhausted
}
