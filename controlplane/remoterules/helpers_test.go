package remoterules_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/remoterules"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// availableYAML declares the test limiter: rack_request counted per
// namespace, with one allowed skip rule.
const availableYAML = `available_limiters:
  rack_request:
    description: every request
    available_properties: [ip, root_namespace, plan]
    allowed_skip_rules: [skip_trusted]
    default_rules:
      - name: per_namespace
        action: limit
        characteristics: [root_namespace]
        limit: 2
        period_s: 3600
`

func mustAvailable(t testing.TB) *config.AvailableLimiters {
	t.Helper()
	a, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(availableYAML))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// counting wraps a RulesService server and counts its calls.
type counting struct {
	rulesv1.RulesServiceServer
	calls atomic.Int64
}

func (c *counting) GetRules(ctx context.Context, req *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
	c.calls.Add(1)
	return c.RulesServiceServer.GetRules(ctx, req)
}

// funcServer answers GetRules with f.
type funcServer struct {
	rulesv1.UnimplementedRulesServiceServer
	f func(context.Context, *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error)
}

func (s funcServer) GetRules(ctx context.Context, req *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
	return s.f(ctx, req)
}

// grpcServer is a real gRPC server on loopback.
type grpcServer struct {
	addr string
	gs   *grpc.Server
	once sync.Once
}

func (s *grpcServer) stop() { s.once.Do(s.gs.Stop) }

func startGRPC(t testing.TB, impl rulesv1.RulesServiceServer) *grpcServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &grpcServer{addr: l.Addr().String(), gs: grpc.NewServer()}
	rulesv1.RegisterRulesServiceServer(s.gs, impl)
	go func() { _ = s.gs.Serve(l) }()
	t.Cleanup(s.stop)
	return s
}

func dial(t testing.TB, addr string) rulesv1.RulesServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rulesv1.NewRulesServiceClient(conn)
}

// clock is a test clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newClient(t testing.TB, rpc rulesv1.RulesServiceClient, service string, mod func(*remoterules.Config)) *remoterules.Client {
	t.Helper()
	cfg := remoterules.Config{Service: service, RulesService: rpc, Available: mustAvailable(t), Timeout: 5 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	c, err := remoterules.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newLimiter returns the "rack_request" limiter on store with the default
// rules, and src's per-request rules. Its checks must succeed: its timeout is
// 10s, not the default 100ms, which a loaded machine descheduling a check on
// Redis that long would hit.
func newLimiter(t testing.TB, store ratelimit.Store, prefix string, src func(context.Context, string, ratelimit.Identifier) *ratelimit.RuleSet) *ratelimit.Limiter {
	t.Helper()
	defaults, err := mustAvailable(t).DefaultRules("rack_request")
	if err != nil {
		t.Fatal(err)
	}
	l, err := ratelimit.New(ratelimit.Config{Name: "rack_request", Store: store, KeyPrefix: prefix, Rules: defaults, RuleSource: src,
		Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func u32(v uint32) *uint32 { return &v }

// limitRule is a schema rule limiting by namespace.
func limitRule(name string, limit uint32) *configv1.Rule {
	return &configv1.Rule{Name: name, Action: configv1.Action_ACTION_LIMIT, Characteristics: []string{"root_namespace"}, Limit: u32(limit), PeriodS: u32(3600)}
}

// eventually polls cond for up to 10s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recorder is a Metrics that keeps every call outcome.
type recorder struct {
	mu    sync.Mutex
	calls []remoterules.CallOutcome
}

func (r *recorder) Lookup(string, remoterules.Lookup) {}

func (r *recorder) Call(_ string, o remoterules.CallOutcome, _ time.Duration) {
	r.mu.Lock()
	r.calls = append(r.calls, o)
	r.mu.Unlock()
}

func (r *recorder) outcomes() []remoterules.CallOutcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]remoterules.CallOutcome(nil), r.calls...)
}
