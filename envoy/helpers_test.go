package ratekitenvoy_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
	"github.com/ratekit/ratekit/internal/promtest"
	"github.com/ratekit/ratekit/observability/observe"
)

// availableYAML declares the limiter the tests serve, with Envoy's usual
// descriptor keys as its properties.
const availableYAML = `
available_limiters:
  edge:
    description: "checked by Envoy at the edge and by the service behind it"
    available_properties: [remote_address, generic_key, path, user, header_match]
    default_rules:
      - name: per_user_api
        match: {generic_key: api}
        characteristics: [user]
        limit: 3
        period_s: 60
        action: limit
      - name: per_ip
        match: {remote_address: {regex: ".*"}}
        characteristics: [remote_address]
        limit: 5
        period_s: 60
        action: limit
      - name: per_path_shadow
        match: {path: {regex: ".*"}}
        characteristics: [path]
        limit: 2
        period_s: 60
        action: log
`

func available(t testing.TB) *config.AvailableLimiters {
	t.Helper()
	a, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(availableYAML))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// gateway is a Service on a real gRPC server on loopback, with a
// go-control-plane client.
type gateway struct {
	svc     *ratekitenvoy.Service
	lim     *ratelimit.Limiter
	client  rlsv3.RateLimitServiceClient
	conn    *grpc.ClientConn
	metrics *observe.Metrics
	reg     *prometheus.Registry
}

// newLimiter builds the "edge" limiter on store with the default rules of
// availableYAML, reporting to m. Its store timeout is generous (the tests run
// on a loaded machine, under -race); opts adjust the config.
// panickingLimiter is a limiter named name whose per_ip rule's limit
// resolver panics: a bug below the service, on every check.
func panickingLimiter(t testing.TB, name string) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{Name: name, Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{{
		Name:            "per_ip",
		Characteristics: []string{"remote_address"},
		LimitFunc:       func(context.Context) (int64, error) { panic("resolver bug") },
		Period:          time.Minute,
		Action:          ratelimit.ActionLimit,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newLimiter(t testing.TB, store ratelimit.Store, prefix string, m *observe.Metrics, opts ...func(*ratelimit.Config)) *ratelimit.Limiter {
	t.Helper()
	rules, err := available(t).DefaultRules("edge")
	if err != nil {
		t.Fatal(err)
	}
	cfg := ratelimit.Config{Name: "edge", Store: store, KeyPrefix: prefix, Rules: rules, Timeout: 5 * time.Second}
	if m != nil {
		cfg.Observer = m.Observe
	}
	for _, o := range opts {
		o(&cfg)
	}
	l, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func startGateway(t testing.TB, l *ratelimit.Limiter, m *observe.Metrics, opts ratekitenvoy.Options) *gateway {
	t.Helper()
	if opts.Available == nil {
		opts.Available = available(t)
	}
	svc, err := ratekitenvoy.NewService([]*ratelimit.Limiter{l}, opts)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(svc.Metrics())
	if m != nil {
		reg.MustRegister(m)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(svc.Codec())) // as cmd/ratekit-envoy
	svc.Register(srv)
	conn := serveGRPC(t, srv)
	return &gateway{svc: svc, lim: l, client: rlsv3.NewRateLimitServiceClient(conn), conn: conn, metrics: m, reg: reg}
}

// serveGRPC serves srv on a loopback port until the test ends and returns a
// client connection to it.
func serveGRPC(t testing.TB, srv *grpc.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func (g *gateway) ask(t testing.TB, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := g.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// desc builds a descriptor from key, value pairs, in order.
func desc(kv ...string) *rlcommonv3.RateLimitDescriptor {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// headers returns response_headers_to_add as a map.
func headers(resp *rlsv3.RateLimitResponse) map[string]string {
	out := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		out[h.GetKey()] = h.GetValue()
	}
	return out
}

// counter reads one series from reg, 0 when absent.
func counter(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	v, _ := promtest.Counter(t, reg, name, labels)
	return v
}

func has(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
