package ratekitenvoy_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	ratelimit "github.com/ratekit/ratekit/core"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
	"github.com/ratekit/ratekit/ratelimittest"
)

// The service's series are exactly these, whatever the callers send: a
// served domain's ok, over_limit and invalid answers and its fail-open
// descriptors from the start, every other answer from its first, and one
// "<unknown>" domain for every domain that is not served, so that no
// caller's string becomes a series. Every answer is counted once, under
// its domain (the one mapped by Options.Domains too) and code.
func TestMetricsSeries(t *testing.T) {
	store := ratelimittest.NewStore(ratelimittest.NewClock(time.Unix(1_700_000_000, 0)))
	edge := newLimiter(t, store, "", nil, func(c *ratelimit.Config) { c.Logger = slog.New(slog.DiscardHandler) }) // the store fails on purpose
	boom := panickingLimiter(t, "boom")
	svc, err := ratekitenvoy.NewService([]*ratelimit.Limiter{edge, boom}, ratekitenvoy.Options{
		Domains: map[string]string{"gw": "edge"},
		Logger:  slog.New(slog.DiscardHandler), // the panic is expected
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(svc.Metrics())

	want := []string{
		`ratekit_envoy_fail_open_descriptors_total{domain="boom"} 0`,
		`ratekit_envoy_fail_open_descriptors_total{domain="edge"} 0`,
		`ratekit_envoy_fail_open_descriptors_total{domain="gw"} 0`,
		`ratekit_envoy_requests_total{code="invalid",domain="boom"} 0`,
		`ratekit_envoy_requests_total{code="invalid",domain="edge"} 0`,
		`ratekit_envoy_requests_total{code="invalid",domain="gw"} 0`,
		`ratekit_envoy_requests_total{code="ok",domain="boom"} 0`,
		`ratekit_envoy_requests_total{code="ok",domain="edge"} 0`,
		`ratekit_envoy_requests_total{code="ok",domain="gw"} 0`,
		`ratekit_envoy_requests_total{code="over_limit",domain="boom"} 0`,
		`ratekit_envoy_requests_total{code="over_limit",domain="edge"} 0`,
		`ratekit_envoy_requests_total{code="over_limit",domain="gw"} 0`,
	}
	if got := series(t, reg); !slices.Equal(got, want) {
		t.Fatalf("series before any request:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	ctx := context.Background()
	one := func(domain, ip string) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("remote_address", ip)}}
	}
	ask := func(ctx context.Context, req *rlsv3.RateLimitRequest) {
		t.Helper()
		_, _ = svc.ShouldRateLimit(ctx, req) // the answers are other tests' business: here only what is counted
	}
	for range 6 { // per_ip allows 5 a minute
		ask(ctx, one("gw", "10.0.0.1"))
	}
	ask(ctx, one("edge", "10.0.0.2"))
	ask(ctx, &rlsv3.RateLimitRequest{Domain: "edge"}) // no descriptors
	for i := range 50 {
		ask(ctx, one(fmt.Sprint("nope", i), "10.0.0.3"))
	}
	ask(ctx, one("", "10.0.0.3"))                       // a malformed domain
	ask(ctx, one(strings.Repeat("x", 300), "10.0.0.3")) // another
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	ask(canceled, one("edge", "10.0.0.4"))
	ask(ctx, one("boom", "10.0.0.5"))
	store.FailWith(errors.New("store down"))
	ask(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{
		desc("remote_address", "10.0.0.6"), desc("remote_address", "10.0.0.7")}})
	// The codec refuses a request over MaxDescriptors before decoding it,
	// under the domain it names when that is served.
	codec := svc.Codec()
	for _, domain := range []string{"gw", "nope"} {
		req := &rlsv3.RateLimitRequest{Domain: domain}
		for range ratekitenvoy.DefaultMaxDescriptors + 1 {
			req.Descriptors = append(req.Descriptors, desc("remote_address", "10.0.0.8"))
		}
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &rlsv3.RateLimitRequest{}); err == nil {
			t.Fatalf("domain %s: %d descriptors decoded", domain, len(req.Descriptors))
		}
	}

	want = []string{
		`ratekit_envoy_fail_open_descriptors_total{domain="boom"} 0`,
		`ratekit_envoy_fail_open_descriptors_total{domain="edge"} 2`,
		`ratekit_envoy_fail_open_descriptors_total{domain="gw"} 0`,
		`ratekit_envoy_requests_total{code="canceled",domain="edge"} 1`,
		`ratekit_envoy_requests_total{code="internal",domain="boom"} 1`,
		`ratekit_envoy_requests_total{code="invalid",domain="<unknown>"} 3`,
		`ratekit_envoy_requests_total{code="invalid",domain="boom"} 0`,
		`ratekit_envoy_requests_total{code="invalid",domain="edge"} 1`,
		`ratekit_envoy_requests_total{code="invalid",domain="gw"} 1`,
		`ratekit_envoy_requests_total{code="ok",domain="boom"} 0`,
		`ratekit_envoy_requests_total{code="ok",domain="edge"} 2`,
		`ratekit_envoy_requests_total{code="ok",domain="gw"} 5`,
		`ratekit_envoy_requests_total{code="over_limit",domain="boom"} 0`,
		`ratekit_envoy_requests_total{code="over_limit",domain="edge"} 0`,
		`ratekit_envoy_requests_total{code="over_limit",domain="gw"} 1`,
		`ratekit_envoy_requests_total{code="unknown_domain",domain="<unknown>"} 50`,
	}
	if got := series(t, reg); !slices.Equal(got, want) {
		t.Fatalf("series after the requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// series returns every series reg gathers, one line each as in Prometheus'
// text format (labels sorted by name), sorted.
func series(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var out []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out = append(out, fmt.Sprintf("%s{%s} %v", f.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue()))
		}
	}
	slices.Sort(out)
	return out
}
