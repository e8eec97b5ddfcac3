package ratekitenvoy_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/core/tiers"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/observability/observe"
)

// redisGateway serves the "edge" limiter on the real test Redis.
func redisGateway(t *testing.T, opts ratekitenvoy.Options) *gateway {
	t.Helper()
	m := observe.NewMetrics(observe.MetricsOptions{})
	l := newLimiter(t, redisstore.New(redistest.Client(t)), redistest.Prefix(t), m)
	return startGateway(t, l, m, opts)
}

// redisClients are the real Redis deployments a test runs on: the
// standalone server and the 3-master cluster.
var redisClients = []struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
}{
	{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
	{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.ClusterClient(t) }},
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// wantStatus checks one descriptor status: its code, the rule and limit it
// reports, and what remains.
func wantStatus(t *testing.T, st *rlsv3.RateLimitResponse_DescriptorStatus, code rlsv3.RateLimitResponse_Code, rule string, limit, remaining uint32) {
	t.Helper()
	if st.GetCode() != code {
		t.Errorf("code %v, want %v (%v)", st.GetCode(), code, st)
	}
	cl := st.GetCurrentLimit()
	if cl.GetName() != rule || cl.GetRequestsPerUnit() != limit || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("current_limit %v, want %s %d/MINUTE", cl, rule, limit)
	}
	if st.GetLimitRemaining() != remaining {
		t.Errorf("limit_remaining %d, want %d", st.GetLimitRemaining(), remaining)
	}
	if d := st.GetDurationUntilReset().AsDuration(); d <= 0 || d > time.Minute {
		t.Errorf("duration_until_reset %v, want within the 60s window", d)
	}
}

// Envoy sends several descriptors, one with nested entries; the 4th request
// for the same user is over per_user_api's limit of 3 while the IP's
// descriptor stays OK.
func TestOverLimitStatusesAndHeaders(t *testing.T) {
	for _, rc := range redisClients {
		for _, concurrent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/concurrent=%v", rc.name, concurrent), func(t *testing.T) {
				m := observe.NewMetrics(observe.MetricsOptions{})
				l := newLimiter(t, redisstore.New(rc.client(t)), redistest.Prefix(t), m)
				testOverLimit(t, startGateway(t, l, m, ratekitenvoy.Options{Concurrent: concurrent}))
			})
		}
	}
}

func testOverLimit(t *testing.T, g *gateway) {
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{
		desc("remote_address", "10.0.0.1"),
		desc("generic_key", "api", "user", "alice"),
	}}
	for n := uint32(1); n <= 3; n++ {
		resp := g.ask(t, req)
		if resp.GetOverallCode() != ok || len(resp.GetStatuses()) != 2 {
			t.Fatalf("request %d: %v", n, resp)
		}
		wantStatus(t, resp.GetStatuses()[0], ok, "per_ip", 5, 5-n)
		wantStatus(t, resp.GetStatuses()[1], ok, "per_user_api", 3, 3-n)
		// The headers come from the most constraining rule: the user's.
		h := headers(resp)
		if h["RateLimit-Policy"] != `"per_user_api";q=3;w=60` || !has(h["RateLimit"], `"per_user_api";r=`+strconv.Itoa(int(3-n))+`;t=`) {
			t.Errorf("request %d headers %v", n, h)
		}
		if _, ok := h["Retry-After"]; ok {
			t.Errorf("request %d: Retry-After on an allowed request", n)
		}
	}
	resp := g.ask(t, req)
	if resp.GetOverallCode() != over {
		t.Fatalf("4th request: %v", resp)
	}
	wantStatus(t, resp.GetStatuses()[0], ok, "per_ip", 5, 1)
	wantStatus(t, resp.GetStatuses()[1], over, "per_user_api", 3, 0)
	h := headers(resp)
	ra, err := strconv.Atoi(h["Retry-After"])
	if err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After %q, want 1..60 seconds", h["Retry-After"])
	}
	if !has(h["RateLimit"], `"per_user_api";r=0;t=`) || h["Cache-Control"] != "no-store" {
		t.Errorf("over-limit headers %v", h)
	}
	// The IP's own limit of 5 is reached by a 5th and passed by a 6th request.
	ip := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: req.Descriptors[:1]}
	wantStatus(t, g.ask(t, ip).GetStatuses()[0], ok, "per_ip", 5, 0)
	resp = g.ask(t, ip)
	if resp.GetOverallCode() != over {
		t.Fatalf("6th request for the IP: %v", resp)
	}
	wantStatus(t, resp.GetStatuses()[0], over, "per_ip", 5, 0)
	if got := counter(t, g.reg, "ratekit_envoy_requests_total", map[string]string{"domain": "edge", "code": "over_limit"}); got != 2 {
		t.Errorf("over_limit requests counted %v, want 2", got)
	}
}

// hits_addend is the cost: the request's, unless a descriptor sets its own
// (0 reads without counting).
func TestHitsAddend(t *testing.T) {
	g := redisGateway(t, ratekitenvoy.Options{})
	d := func(hits *uint64) *rlcommonv3.RateLimitDescriptor {
		x := desc("remote_address", "10.0.0.2")
		if hits != nil {
			x.HitsAddend = wrapperspb.UInt64(*hits)
		}
		return x
	}
	zero, three := uint64(0), uint64(3)
	for i, c := range []struct {
		reqHits   uint32
		descHits  *uint64
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{
		{2, nil, ok, 3},    // request-level: count 2
		{2, &zero, ok, 3},  // descriptor 0 overrides the request: a read
		{2, &three, ok, 0}, // descriptor 3 overrides the request's 2: count 5
		{0, nil, over, 0},  // unset: 1, count 6 > 5
	} {
		resp := g.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: c.reqHits,
			Descriptors: []*rlcommonv3.RateLimitDescriptor{d(c.descHits)}})
		if resp.GetOverallCode() != c.code {
			t.Fatalf("step %d: %v", i, resp)
		}
		wantStatus(t, resp.GetStatuses()[0], c.code, "per_ip", 5, c.remaining)
	}
}

// A hits_addend over MaxHits can never pass: each descriptor it applies to
// (its own, or the request's when it sets none) is OVER_LIMIT, without
// Retry-After and without a current_limit, and is not counted; the others
// are checked as usual. An error instead would let the whole request through
// uncounted (Envoy fails open on it): a huge hits_addend would lift every
// limit.
func TestHitsOverMaxHitsNeverPass(t *testing.T) {
	l := newLimiter(t, ratelimit.NewMemoryStore(), "", nil)
	g := startGateway(t, l, nil, ratekitenvoy.Options{MaxHits: 100})
	withHits := func(ip string, hits uint64) *rlcommonv3.RateLimitDescriptor {
		d := desc("remote_address", ip)
		d.HitsAddend = wrapperspb.UInt64(hits)
		return d
	}
	for _, c := range []struct {
		name    string
		hits    uint32 // the request's
		descs   []*rlcommonv3.RateLimitDescriptor
		codes   []rlsv3.RateLimitResponse_Code
		counted []float64 // per_ip's count of each descriptor's address after the request
	}{
		{"request's", 101, []*rlcommonv3.RateLimitDescriptor{desc("remote_address", "10.2.0.1")},
			[]rlsv3.RateLimitResponse_Code{over}, []float64{0}},
		{"descriptor's", 0, []*rlcommonv3.RateLimitDescriptor{withHits("10.2.0.2", 1<<40), desc("remote_address", "10.2.0.3")},
			[]rlsv3.RateLimitResponse_Code{over, ok}, []float64{0, 1}},
		{"request's, one descriptor's own within", 1 << 31, []*rlcommonv3.RateLimitDescriptor{withHits("10.2.0.4", 2), desc("remote_address", "10.2.0.5")},
			[]rlsv3.RateLimitResponse_Code{ok, over}, []float64{2, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := g.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: c.hits, Descriptors: c.descs})
			if resp.GetOverallCode() != over || len(resp.GetStatuses()) != len(c.codes) {
				t.Fatalf("answer %v, want OVER_LIMIT with %d statuses", resp, len(c.codes))
			}
			for i, st := range resp.GetStatuses() {
				if st.GetCode() != c.codes[i] {
					t.Errorf("descriptor #%d: %v, want %v", i, st, c.codes[i])
				}
				if c.codes[i] == over && st.GetCurrentLimit() != nil {
					t.Errorf("descriptor #%d: current_limit %v: no rule was evaluated", i, st.GetCurrentLimit())
				}
				ip := c.descs[i].GetEntries()[0].GetValue()
				r := l.Peek(context.Background(), ratelimit.Identifier{"remote_address": ip}, ratelimit.Cost(0))
				if len(r.Evaluations) != 1 || r.Evaluations[0].Info.Count != c.counted[i] {
					t.Errorf("descriptor #%d: per_ip %+v, want count %v", i, r.Evaluations, c.counted[i])
				}
			}
			h := headers(resp)
			if v, found := h["Retry-After"]; found {
				t.Errorf("Retry-After %q: the request can never pass", v)
			}
			if h["Cache-Control"] != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", h["Cache-Control"])
			}
		})
	}
	if got := counter(t, g.reg, "ratekit_envoy_requests_total", map[string]string{"domain": "edge", "code": "over_limit"}); got != 3 {
		t.Errorf("over_limit requests counted %v, want 3", got)
	}
}

// A value over MaxValueLen (a path or a header a client sends, which Envoy
// passes on whatever its length) is checked as MaxValueLen bytes standing
// for it: its first bytes and a digest of the whole. The request is not an
// error, which would let it through uncounted (Envoy fails open on it): a
// long URL would lift every limit. Two long values stay apart however long
// their common start, a rule matching how a value starts matches it, and a
// shadow rule stays shadow.
func TestValueOverMaxValueLen(t *testing.T) {
	l := newLimiter(t, ratelimit.NewMemoryStore(), "", nil)
	g := startGateway(t, l, nil, ratekitenvoy.Options{MaxValueLen: 48})
	long := strings.Repeat("u", 100) // two users sharing their first 100 bytes
	ask := func(descs ...*rlcommonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		return g.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descs})
	}
	// per_user_api (3 a minute) counts each long user apart.
	for n := 1; n <= 4; n++ {
		resp := ask(desc("generic_key", "api", "user", long+"-a"), desc("remote_address", "10.3.0.1"))
		want := ok
		if n == 4 {
			want = over
		}
		wantStatus(t, resp.GetStatuses()[0], want, "per_user_api", 3, uint32(max(3-n, 0)))
		wantStatus(t, resp.GetStatuses()[1], ok, "per_ip", 5, uint32(5-n))
	}
	wantStatus(t, ask(desc("generic_key", "api", "user", long+"-b")).GetStatuses()[0], ok, "per_user_api", 3, 2)
	// A long path only a shadow rule counts (2 a minute) is never blocked.
	for n := 1; n <= 3; n++ {
		if resp := ask(desc("path", "/"+long)); resp.GetOverallCode() != ok {
			t.Fatalf("long path, request %d: %v", n, resp)
		}
	}
	// A rule matching how a value starts matches a long one.
	m := ratelimit.NewMemoryStore()
	prefix, err := ratelimit.New(ratelimit.Config{Name: "edge", Store: m, Rules: []ratelimit.Rule{{
		Name: "search", Match: map[string]ratelimit.Matcher{"path": ratelimit.Regex("^/search")},
		Characteristics: []string{"remote_address"}, Limit: 1, Period: time.Minute, Action: ratelimit.ActionLimit,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	pg := startGateway(t, prefix, nil, ratekitenvoy.Options{MaxValueLen: 48})
	for n, want := range []rlsv3.RateLimitResponse_Code{ok, over} {
		resp := pg.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{
			desc("remote_address", "10.3.0.2", "path", "/search?q="+long+strconv.Itoa(n))}})
		wantStatus(t, resp.GetStatuses()[0], want, "search", 1, 0)
	}
}

// A descriptor's limit override is a limit rule above every tier: it answers
// for the descriptor, blocks at its own limit, and (being terminal when it
// blocks) keeps the rules below from being charged.
func TestLimitOverride(t *testing.T) {
	g := redisGateway(t, ratekitenvoy.Options{})
	d := desc("remote_address", "10.0.0.3")
	d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}}
	for n := uint32(1); n <= 2; n++ {
		resp := g.ask(t, req)
		if resp.GetOverallCode() != ok {
			t.Fatalf("request %d: %v", n, resp)
		}
		wantStatus(t, resp.GetStatuses()[0], ok, "envoy_override_60s", 2, 2-n)
	}
	resp := g.ask(t, req)
	if resp.GetOverallCode() != over {
		t.Fatalf("3rd request: %v", resp)
	}
	wantStatus(t, resp.GetStatuses()[0], over, "envoy_override_60s", 2, 0)
	if h := headers(resp); h["RateLimit-Policy"] != `"envoy_override_60s";q=2;w=60` || h["Retry-After"] == "" {
		t.Errorf("headers %v", h)
	}
	// per_ip below the override was charged twice, not by the blocked 3rd.
	r := g.lim.Peek(context.Background(), ratelimit.Identifier{"remote_address": "10.0.0.3"}, ratelimit.Cost(0))
	if r.Failed() || len(r.Evaluations) != 1 || r.Evaluations[0].Info.Count != 2 {
		t.Fatalf("per_ip after the override blocked: %+v", r)
	}
	// A multiplier gives the window: 2 per 30 seconds is its own counter.
	d.Limit.Unit, d.Limit.UnitMultiplier = typev3.RateLimitUnit_SECOND, wrapperspb.UInt32(30)
	resp = g.ask(t, req)
	st := resp.GetStatuses()[0]
	if resp.GetOverallCode() != ok || st.GetCurrentLimit().GetName() != "envoy_override_30s" ||
		st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || st.GetCurrentLimit().GetUnitMultiplier().GetValue() != 30 {
		t.Fatalf("30-second override: %v", resp)
	}
}

// A shadow (log) rule counts and reports in metrics but never blocks nor
// shapes the answer.
func TestShadowRuleNeverBlocks(t *testing.T) {
	g := redisGateway(t, ratekitenvoy.Options{})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("path", "/search")}}
	for n := 1; n <= 4; n++ {
		resp := g.ask(t, req)
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != ok || st.GetCode() != ok || st.GetCurrentLimit() != nil || len(resp.GetResponseHeadersToAdd()) != 0 {
			t.Fatalf("request %d (over the shadow limit of 2 from the 3rd): %v", n, resp)
		}
	}
	got := counter(t, g.reg, "ratelimit_rule_evaluations_total", map[string]string{"rule": "per_path_shadow", "result": "log"})
	if got != 2 {
		t.Errorf("shadow rule exceeded %v times in metrics, want 2", got)
	}
}

// A rule published into the rule store changes the gateway's answer after
// the replica's refresh, and inherits the counter of the rule it replaces.
func TestPublishedRuleChangesAnswer(t *testing.T) {
	ctx := context.Background()
	client := redistest.Client(t)
	m := observe.NewMetrics(observe.MetricsOptions{})
	l := newLimiter(t, redisstore.New(client), redistest.Prefix(t), m)
	avail := available(t)
	rules, err := rulestore.New(client, rulestore.Options{Prefix: redistest.Prefix(t) + "{rules}:", Available: avail})
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := avail.DefaultRules("edge")
	if err != nil {
		t.Fatal(err)
	}
	if err := rules.Bind(l, tiers.Set{Defaults: defaults}); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, l, m, ratekitenvoy.Options{})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("remote_address", "10.0.0.9")}}
	wantStatus(t, g.ask(t, req).GetStatuses()[0], ok, "per_ip", 5, 4)

	pub, err := config.ParsePublishRulesRequest("publish.yaml", []byte(`
rate_limits:
  edge:
    - name: per_ip
      match: {remote_address: {regex: ".*"}}
      characteristics: [remote_address]
      limit: 1
      period_s: 60
      action: limit
`), avail)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rules.Publish(ctx, pub); err != nil {
		t.Fatal(err)
	}
	// Before the refresh the replica still holds the defaults.
	wantStatus(t, g.ask(t, req).GetStatuses()[0], ok, "per_ip", 5, 3)
	if err := rules.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	resp := g.ask(t, req)
	if resp.GetOverallCode() != over {
		t.Fatalf("after publishing per_ip limit 1: %v", resp)
	}
	wantStatus(t, resp.GetStatuses()[0], over, "per_ip", 1, 0)
}

// The gateway and the service behind it share one counter: the same limiter
// name and rules on the same Redis give the same key.
func TestGatewayAndServiceShareCounter(t *testing.T) {
	for _, rc := range redisClients {
		t.Run(rc.name, func(t *testing.T) { testShareCounter(t, rc.client(t)) })
	}
}

func testShareCounter(t *testing.T, client redis.UniversalClient) {
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	g := startGateway(t, newLimiter(t, redisstore.New(client), prefix, nil), nil, ratekitenvoy.Options{})
	service := newLimiter(t, redisstore.New(client), prefix, nil) // in-process, in another service
	id := ratelimit.Identifier{"remote_address": "10.0.0.7"}
	for i := 0; i < 4; i++ {
		if r := service.Check(ctx, id); r.Blocked() || r.Failed() {
			t.Fatalf("service check %d: %+v", i, r)
		}
	}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("remote_address", "10.0.0.7")}}
	wantStatus(t, g.ask(t, req).GetStatuses()[0], ok, "per_ip", 5, 0) // the 5th hit
	if r := service.Check(ctx, id); !r.Blocked() || r.Info.Count != 6 {
		t.Fatalf("service check after the gateway's: %+v", r)
	}
	if resp := g.ask(t, req); resp.GetOverallCode() != over {
		t.Fatalf("gateway after the service's block: %v", resp)
	}
}

// countingStore counts the store calls of the limiter under test.
type countingStore struct {
	ratelimit.Store
	calls atomic.Int64
}

func (s *countingStore) Eval(ctx context.Context, mode ratelimit.Mode, ops []ratelimit.Op) ([]ratelimit.OpResult, error) {
	s.calls.Add(1)
	return s.Store.Eval(ctx, mode, ops)
}

func (s *countingStore) ContextBounded() bool {
	cb, ok := s.Store.(interface{ ContextBounded() bool })
	return ok && cb.ContextBounded()
}

// A Redis outage: the answers stay OK (fail-open, counted), the breaker opens
// after 3 failures, and from then on no request reaches the store.
func TestRedisOutageFailsOpen(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	store := &countingStore{Store: redisstore.New(client)}
	m := observe.NewMetrics(observe.MetricsOptions{})
	// A long cooldown keeps the breaker open for the whole test.
	l := newLimiter(t, store, redistest.Prefix(t), m, func(c *ratelimit.Config) {
		c.Breaker = ratelimit.BreakerConfig{Failures: 3, Cooldown: time.Hour}
		c.Timeout = time.Second // a refused connection fails at once; this bounds a dead one
	})
	g := startGateway(t, l, m, ratekitenvoy.Options{})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("remote_address", "10.0.0.5")}}
	wantStatus(t, g.ask(t, req).GetStatuses()[0], ok, "per_ip", 5, 4)

	srv.Stop()
	for i := 0; i < 10; i++ {
		resp := g.ask(t, req) // within ask's 10s deadline
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != ok || st.GetCode() != ok || st.GetCurrentLimit() != nil {
			t.Fatalf("request %d during the outage: %v", i, resp)
		}
	}
	if s := l.BreakerState(); s != "open" {
		t.Errorf("breaker %s, want open", s)
	}
	// 1 before the outage + 3 failures that open the breaker; the other 7
	// were answered without the store.
	if n := store.calls.Load(); n != 4 {
		t.Errorf("store called %d times, want 4", n)
	}
	if got := counter(t, g.reg, "ratekit_envoy_fail_open_descriptors_total", map[string]string{"domain": "edge"}); got != 10 {
		t.Errorf("fail-open descriptors counted %v, want 10", got)
	}
}

// Unknown domains: NOT_FOUND naming the domain by default, OK by option;
// Options.Domains maps an Envoy domain to a limiter.
func TestDomains(t *testing.T) {
	l := newLimiter(t, ratelimit.NewMemoryStore(), "", nil)
	req := &rlsv3.RateLimitRequest{Domain: "other", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("remote_address", "1.2.3.4")}}

	g := startGateway(t, l, nil, ratekitenvoy.Options{})
	_, err := g.client.ShouldRateLimit(context.Background(), req)
	if status.Code(err) != codes.NotFound || !has(err.Error(), `unknown domain "other"`, "edge") {
		t.Errorf("unknown domain: %v", err)
	}

	l2 := newLimiter(t, ratelimit.NewMemoryStore(), "", nil)
	g = startGateway(t, l2, nil, ratekitenvoy.Options{UnknownDomain: ratekitenvoy.UnknownDomainOK})
	if resp := g.ask(t, req); resp.GetOverallCode() != ok || len(resp.GetStatuses()) != 1 || resp.GetStatuses()[0].GetCode() != ok {
		t.Errorf("unknown domain with UnknownDomainOK: %v", resp)
	}

	l3 := newLimiter(t, ratelimit.NewMemoryStore(), "", nil)
	g = startGateway(t, l3, nil, ratekitenvoy.Options{Domains: map[string]string{"other": "edge"}})
	if resp := g.ask(t, req); resp.GetStatuses()[0].GetCurrentLimit().GetName() != "per_ip" {
		t.Errorf("mapped domain: %v", resp)
	}

	if _, err := ratekitenvoy.NewService([]*ratelimit.Limiter{l3}, ratekitenvoy.Options{Domains: map[string]string{"x": "nope"}}); err == nil || !has(err.Error(), `"x"`, `"nope"`) {
		t.Errorf("mapping to a missing limiter: %v", err)
	}
	if _, err := ratekitenvoy.NewService([]*ratelimit.Limiter{l3, l3}, ratekitenvoy.Options{}); err == nil {
		t.Error("a limiter given twice was accepted")
	}
	if _, err := ratekitenvoy.NewService(nil, ratekitenvoy.Options{}); err == nil {
		t.Error("no limiters accepted")
	}
	other, err := ratelimit.New(ratelimit.Config{Name: "undeclared", Store: ratelimit.NewMemoryStore()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ratekitenvoy.NewService([]*ratelimit.Limiter{other}, ratekitenvoy.Options{Available: available(t)}); err == nil || !has(err.Error(), "undeclared is not declared") {
		t.Errorf("limiter outside available_limiters.yaml: %v", err)
	}
}

// Malformed requests get INVALID_ARGUMENT with a message naming the
// descriptor and entry, and are rejected whole: nothing is counted.
func TestMalformedRequests(t *testing.T) {
	l := newLimiter(t, ratelimit.NewMemoryStore(), "", nil)
	g := startGateway(t, l, nil, ratekitenvoy.Options{MaxDescriptors: 4, MaxEntries: 3, MaxValueLen: 16})
	good := func() *rlcommonv3.RateLimitDescriptor { return desc("remote_address", "10.1.1.1") }
	many := func(n int) []*rlcommonv3.RateLimitDescriptor {
		out := make([]*rlcommonv3.RateLimitDescriptor, n)
		for i := range out {
			out[i] = good()
		}
		return out
	}
	withDesc := func(f func(d *rlcommonv3.RateLimitDescriptor)) []*rlcommonv3.RateLimitDescriptor {
		d := good()
		f(d)
		return []*rlcommonv3.RateLimitDescriptor{good(), d}
	}
	edge := 0 // requests for the domain edge
	for _, c := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"no domain", &rlsv3.RateLimitRequest{Descriptors: many(1)}, "domain is empty"},
		{"huge domain", &rlsv3.RateLimitRequest{Domain: string(make([]byte, 300)), Descriptors: many(1)}, "domain is 300 bytes"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "edge"}, "no descriptors"},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many(5)}, "5 descriptors, over the limit of 4"},
		{"null descriptor", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{good(), {}}}, "descriptor #1 has no entries"},
		{"too many entries", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{good(), desc("remote_address", "a", "path", "b", "user", "c", "generic_key", "d")}}, "descriptor #1 has 4 entries"},
		{"bad key", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: withDesc(func(d *rlcommonv3.RateLimitDescriptor) { d.Entries[0].Key = "X-Api-Key" })}, `descriptor #1 entry #0: key "X-Api-Key" must match`},
		{"empty key", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: withDesc(func(d *rlcommonv3.RateLimitDescriptor) { d.Entries[0].Key = "" })}, `key "" must match`},
		{"undeclared key", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: withDesc(func(d *rlcommonv3.RateLimitDescriptor) { d.Entries[0].Key = "tenant" })}, `key "tenant" is not an available property of limiter edge`},
		{"duplicate key", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{good(), desc("path", "a", "path", "b")}}, `descriptor #1 entry #1: key "path" appears twice`},
		{"long value and a bad key", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{good(), desc("path", "0123456789abcdefg", "X", "b")}}, `descriptor #1 entry #1: key "X" must match`},
		{"refund", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: withDesc(func(d *rlcommonv3.RateLimitDescriptor) { d.IsNegativeHits = true })}, "is_negative_hits"},
		{"override without unit", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: withDesc(func(d *rlcommonv3.RateLimitDescriptor) {
			d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5}
		})}, "descriptor #1: limit override: unit UNKNOWN is not supported"},
		{"override of unknown unit", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: withDesc(func(d *rlcommonv3.RateLimitDescriptor) {
			d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: 99}
		})}, "unit 99 is not supported"},
		{"override zero multiplier", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: withDesc(func(d *rlcommonv3.RateLimitDescriptor) {
			d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(0)}
		})}, "unit_multiplier 0"},
		{"override window too long", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: withDesc(func(d *rlcommonv3.RateLimitDescriptor) {
			d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(2)}
		})}, "unit_multiplier 2"},
	} {
		if c.req.GetDomain() == "edge" {
			edge++
		}
		t.Run(c.name, func(t *testing.T) {
			want := codes.InvalidArgument
			if has(c.name, "too many") {
				want = codes.Internal // refused by the codec, before decoding (a codec's error is INTERNAL)
			}
			_, err := g.client.ShouldRateLimit(context.Background(), c.req)
			if status.Code(err) != want || !has(status.Convert(err).Message(), c.want) {
				t.Fatalf("got %v, want %v with %q", err, want, c.want)
			}
		})
	}
	// The valid first descriptor of every rejected request was never counted.
	r := l.Peek(context.Background(), ratelimit.Identifier{"remote_address": "10.1.1.1"}, ratelimit.Cost(0))
	if len(r.Evaluations) != 1 || r.Evaluations[0].Info.Count != 0 {
		t.Fatalf("a rejected request was counted: %+v", r)
	}
	if got := counter(t, g.reg, "ratekit_envoy_requests_total", map[string]string{"domain": "edge", "code": "invalid"}); got != float64(edge) {
		t.Errorf("invalid requests counted %v, want %d", got, edge)
	}
}

// A limit override of 0 requests per unit denies every request, as in
// envoyproxy/ratelimit.
func TestOverrideZeroDeniesAll(t *testing.T) {
	l := newLimiter(t, ratelimit.NewMemoryStore(), "", nil)
	g := startGateway(t, l, nil, ratekitenvoy.Options{})
	d := desc("user", "mallory")
	d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 0, Unit: typev3.RateLimitUnit_HOUR}
	resp := g.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
	if resp.GetOverallCode() != over || resp.GetStatuses()[0].GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Fatalf("override 0/HOUR: %v", resp)
	}
}

func ExampleNewService() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "edge",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{
			Name:            "per_ip",
			Match:           map[string]ratelimit.Matcher{"remote_address": ratelimit.Regex(".*")},
			Characteristics: []string{"remote_address"},
			Limit:           1,
			Period:          time.Minute,
			Action:          ratelimit.ActionLimit,
		}},
	})
	if err != nil {
		panic(err)
	}
	svc, err := ratekitenvoy.NewService([]*ratelimit.Limiter{limiter}, ratekitenvoy.Options{})
	if err != nil {
		panic(err)
	}
	// In a server: svc.Register(grpc.NewServer(grpc.ForceServerCodecV2(svc.Codec()))).
	// Here, called directly as Envoy would.
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
		Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}},
	}}}
	for range 2 {
		resp, _ := svc.ShouldRateLimit(context.Background(), req)
		fmt.Println(resp.GetOverallCode(), resp.GetStatuses()[0].GetCurrentLimit().GetName())
	}
	// Output:
	// OK per_ip
	// OVER_LIMIT per_ip
}

// A request without descriptors is malformed whatever its domain: an unknown
// domain answered OK by Options.UnknownDomain still needs descriptors to
// answer for (envoyproxy/ratelimit refuses an empty list before it looks the
// domain up).
func TestNoDescriptorsForUnknownDomain(t *testing.T) {
	for _, tt := range []struct {
		name    string
		unknown ratekitenvoy.UnknownDomain
	}{
		{"error", ratekitenvoy.UnknownDomainError},
		{"ok", ratekitenvoy.UnknownDomainOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := startGateway(t, newLimiter(t, ratelimit.NewMemoryStore(), "", nil), nil, ratekitenvoy.Options{UnknownDomain: tt.unknown})
			resp, err := g.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "other"})
			if status.Code(err) != codes.InvalidArgument || !has(status.Convert(err).Message(), "no descriptors") {
				t.Fatalf("got %v, %v, want INVALID_ARGUMENT: no descriptors", resp, err)
			}
			if got := counter(t, g.reg, "ratekit_envoy_requests_total", map[string]string{"domain": "<unknown>", "code": "invalid"}); got != 1 {
				t.Errorf("invalid requests of unknown domains counted %v, want 1", got)
			}
		})
	}
}
