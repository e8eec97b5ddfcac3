package ratelimitgrpc

import (
	"context"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/middleware/adapter"
)

const (
	healthCheck = "/grpc.health.v1.Health/Check"
	healthList  = "/grpc.health.v1.Health/List"
	workDo      = "/ratekit.test.Work/Do"
)

// work is a test service with one unary method, Do, registered by hand (no
// generated code): "cost=<v>" adds v to the meter's db_s, "fail" returns
// Unauthenticated, "panic" adds 2 and panics, anything else succeeds. It counts the calls it serves.
type work struct{ calls atomic.Int64 }

func (w *work) do(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	w.calls.Add(1)
	switch v := in.GetValue(); {
	case strings.HasPrefix(v, "cost="):
		f, err := strconv.ParseFloat(strings.TrimPrefix(v, "cost="), 64)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		adapter.AddCost(ctx, "db_s", f)
	case v == "fail":
		return nil, status.Error(codes.Unauthenticated, "bad credentials")
	case v == "panic": // after work worth 2 db_s
		adapter.AddCost(ctx, "db_s", 2)
		panic("the handler's bug")
	}
	return wrapperspb.String("ok"), nil
}

var workDesc = grpc.ServiceDesc{
	ServiceName: "ratekit.test.Work",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Do",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return srv.(*work).do(ctx, req.(*wrapperspb.StringValue))
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: workDo}, h)
		},
	}},
}

type testEnv struct {
	conn   *grpc.ClientConn
	health healthpb.HealthClient
	work   *work
}

// start serves the health and work services on a real loopback listener with
// the given interceptors and returns a real client.
func start(t *testing.T, opts ...grpc.ServerOption) *testEnv {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	w := &work{}
	srv.RegisterService(&workDesc, w)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &testEnv{conn: conn, health: healthpb.NewHealthClient(conn), work: w}
}

func unary(l *ratelimit.Limiter, opts ...Option) grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(UnaryServerInterceptor(l, opts...))
}

// result of one call: its error and the header and trailer metadata.
type reply struct {
	err             error
	header, trailer metadata.MD
}

func (e *testEnv) check(t *testing.T, md ...string) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	var r reply
	_, r.err = e.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	return r
}

func (e *testEnv) list(t *testing.T) reply {
	t.Helper()
	var r reply
	_, r.err = e.health.List(context.Background(), &healthpb.HealthListRequest{}, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	return r
}

func (e *testEnv) do(t *testing.T, v string, md ...string) reply {
	t.Helper()
	ctx := context.Background()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	var r reply
	r.err = e.conn.Invoke(ctx, workDo, wrapperspb.String(v), new(wrapperspb.StringValue), grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	return r
}

// recorder is a limiter Observer that keeps the identifiers it sees.
type recorder struct {
	mu  sync.Mutex
	ids []ratelimit.Identifier
}

func (r *recorder) Observe(_ context.Context, e ratelimit.Event) {
	r.mu.Lock()
	r.ids = append(r.ids, e.Identifier)
	r.mu.Unlock()
}

func (r *recorder) last(t *testing.T) ratelimit.Identifier {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ids) == 0 {
		t.Fatal("the limiter saw no check")
	}
	return r.ids[len(r.ids)-1]
}

// quiet drops the limiters' fail-open warnings, which the tests provoke.
var quiet = slog.New(slog.DiscardHandler)

type limiterOpt func(*ratelimit.Config)

func observed(o func(context.Context, ratelimit.Event)) limiterOpt {
	return func(c *ratelimit.Config) { c.Observer = o }
}

// redisTimeout is the timeout of the limiters on Redis, whose checks must
// succeed: the default 100ms is hit by a loaded machine descheduling a check
// that long.
const redisTimeout = 10 * time.Second

// redisLimiter builds a limiter on the test Redis (redistest.URL), with a key
// prefix unique to the test.
func redisLimiter(t *testing.T, name string, rules []ratelimit.Rule, opts ...limiterOpt) *ratelimit.Limiter {
	t.Helper()
	return newLimiter(t, ratelimit.Config{Name: name, Store: redisstore.New(redistest.Client(t)), KeyPrefix: redistest.Prefix(t), Rules: rules,
		Timeout: redisTimeout}, opts...)
}

func memLimiter(t *testing.T, name string, rules []ratelimit.Rule, opts ...limiterOpt) *ratelimit.Limiter {
	t.Helper()
	return newLimiter(t, ratelimit.Config{Name: name, Store: ratelimit.NewMemoryStore(), Rules: rules}, opts...)
}

func newLimiter(t *testing.T, cfg ratelimit.Config, opts ...limiterOpt) *ratelimit.Limiter {
	t.Helper()
	cfg.Logger = quiet
	for _, o := range opts {
		o(&cfg)
	}
	l, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func rule(name string, limit int64, period time.Duration, action ratelimit.Action, chars ...string) ratelimit.Rule {
	return ratelimit.Rule{Name: name, Characteristics: chars, Limit: limit,
		Period: period, Action: action}
}

func wantCode(t *testing.T, r reply, want codes.Code) {
	t.Helper()
	if got := status.Code(r.err); got != want {
		t.Fatalf("code = %v (%v), want %v", got, r.err, want)
	}
}

// wantRateMD asserts the default (IETF) rate-limit header metadata,
// ratelimit-policy and ratelimit; limit < 0 asserts that there is none, in any
// profile.
func wantRateMD(t *testing.T, md metadata.MD, limit, remaining int, maxReset time.Duration) {
	t.Helper()
	if limit < 0 {
		for _, k := range []string{MetadataPolicy, MetadataRateLimit, MetadataLimit, MetadataRemaining, MetadataReset, "ratelimit-name"} {
			if v := md.Get(k); len(v) != 0 {
				t.Fatalf("metadata %s = %q, want none", k, v)
			}
		}
		return
	}
	policy, rl := md.Get(MetadataPolicy), md.Get(MetadataRateLimit)
	pm := regexp.MustCompile(`^"[a-z0-9_]+";q=(\d+);w=\d+$`).FindStringSubmatch(strings.Join(policy, ","))
	rm := regexp.MustCompile(`^"[a-z0-9_]+";r=(\d+);t=(\d+)$`).FindStringSubmatch(strings.Join(rl, ","))
	if len(policy) != 1 || pm == nil || pm[1] != strconv.Itoa(limit) {
		t.Fatalf("%s = %q, want q=%d", MetadataPolicy, policy, limit)
	}
	if len(rl) != 1 || rm == nil || rm[1] != strconv.Itoa(remaining) {
		t.Fatalf("%s = %q, want r=%d", MetadataRateLimit, rl, remaining)
	}
	n, _ := strconv.Atoi(rm[2])
	if n < 1 || time.Duration(n)*time.Second > maxReset {
		t.Fatalf("%s = %q, want t in whole seconds in [1, %v]", MetadataRateLimit, rl, maxReset)
	}
}

// details unpacks the rate-limit details of a status error.
func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure, *errdetails.ErrorInfo) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("%v is not a status error", err)
	}
	var (
		ri *errdetails.RetryInfo
		qf *errdetails.QuotaFailure
		ei *errdetails.ErrorInfo
	)
	for _, d := range st.Details() {
		switch x := d.(type) {
		case *errdetails.RetryInfo:
			ri = x
		case *errdetails.QuotaFailure:
			qf = x
		case *errdetails.ErrorInfo:
			ei = x
		default:
			t.Fatalf("unexpected detail %T: %v", d, d)
		}
	}
	// A call that can never pass has no RetryInfo (and says so in ErrorInfo).
	if qf == nil || ei == nil || ri == nil && ei.GetMetadata()["never"] != "true" {
		t.Fatalf("details %v: want RetryInfo, QuotaFailure and ErrorInfo", st.Details())
	}
	return ri, qf, ei
}
