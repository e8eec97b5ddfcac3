package ratelimitgrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

func TestUnaryAllowThenBlock(t *testing.T) {
	l := redisLimiter(t, "grpc_request", []ratelimit.Rule{rule("per_ip", 2, time.Minute, ratelimit.ActionLimit, identifiers.IP)})
	env := start(t, unary(l))

	for i, remaining := range []int{1, 0} {
		r := env.check(t)
		wantCode(t, r, codes.OK)
		wantRateMD(t, r.header, 2, remaining, time.Minute)
		if v := r.trailer.Get(TrailerPushback); len(v) != 0 {
			t.Fatalf("call %d: allowed call has pushback trailer %q", i+1, v)
		}
	}

	r := env.check(t)
	wantCode(t, r, codes.ResourceExhausted)
	wantRateMD(t, r.header, 2, 0, time.Minute)
	ri, qf, ei := details(t, r.err)

	delay := ri.GetRetryDelay().AsDuration()
	if delay%time.Second != 0 || delay < 58*time.Second || delay > time.Minute {
		t.Fatalf("RetryInfo delay = %v, want whole seconds, about 60s", delay)
	}
	if got := r.trailer.Get(TrailerPushback); len(got) != 1 || got[0] != strconv.FormatInt(delay.Milliseconds(), 10) {
		t.Fatalf("%s = %q, want %d", TrailerPushback, got, delay.Milliseconds())
	}
	if len(qf.GetViolations()) != 1 {
		t.Fatalf("QuotaFailure has %d violations, want 1", len(qf.GetViolations()))
	}
	v := qf.GetViolations()[0]
	if v.GetSubject() != "ratelimit:grpc_request/per_ip" || v.GetQuotaMetric() != "grpc_request" || v.GetQuotaId() != "per_ip" ||
		v.GetQuotaValue() != 2 || v.GetApiService() != "grpc.health.v1.Health" {
		t.Fatalf("violation = %v", v)
	}
	if want := "rate limit of 2 per 1m0s exceeded (limiter grpc_request, rule per_ip)"; v.GetDescription() != want {
		t.Fatalf("description = %q, want %q", v.GetDescription(), want)
	}
	wantMeta := map[string]string{"limiter": "grpc_request", "rule": "per_ip", "limit": "2", "period_s": "60",
		"retry_after_s": strconv.Itoa(int(delay / time.Second)), "banned": "false", "never": "false"}
	if ei.GetReason() != Reason || ei.GetDomain() != "grpc.health.v1.Health" || fmt.Sprint(ei.GetMetadata()) != fmt.Sprint(wantMeta) {
		t.Fatalf("ErrorInfo = %v, want reason %s, domain grpc.health.v1.Health, metadata %v", ei, Reason, wantMeta)
	}
	// The details name limiter and rule, never identifier values.
	st, _ := status.FromError(r.err)
	if text := st.Message() + prototext.Format(st.Proto()); strings.Contains(text, "127.0.0.1") {
		t.Fatalf("status leaks the client IP: %s", text)
	}
}

func TestDomainAndDenyHandler(t *testing.T) {
	rules := []ratelimit.Rule{rule("one", 1, time.Minute, ratelimit.ActionLimit)}
	t.Run("domain", func(t *testing.T) {
		env := start(t, unary(memLimiter(t, "api", rules), WithDomain("api.example.com")))
		env.check(t)
		r := env.check(t)
		if _, _, ei := details(t, r.err); ei.GetDomain() != "api.example.com" {
			t.Fatalf("domain = %q, want api.example.com", ei.GetDomain())
		}
	})
	t.Run("custom error", func(t *testing.T) {
		deny := func(_ context.Context, call *Call, res ratelimit.Result) error {
			return status.Errorf(codes.Unavailable, "slow down (%s, %s)", call.Method, res.Rule.Name)
		}
		env := start(t, unary(memLimiter(t, "api", rules), WithDenyHandler(deny)))
		env.check(t)
		r := env.check(t)
		wantCode(t, r, codes.Unavailable)
		if msg := status.Convert(r.err).Message(); msg != "slow down (Check, one)" {
			t.Fatalf("message = %q", msg)
		}
	})
	t.Run("nil from deny handler means the default", func(t *testing.T) {
		called := false
		deny := func(context.Context, *Call, ratelimit.Result) error { called = true; return nil }
		env := start(t, unary(memLimiter(t, "api", rules), WithDenyHandler(deny)))
		env.check(t)
		r := env.check(t)
		wantCode(t, r, codes.ResourceExhausted)
		details(t, r.err)
		if !called {
			t.Fatal("deny handler not called")
		}
	})
	t.Run("no metadata, no pushback", func(t *testing.T) {
		env := start(t, unary(memLimiter(t, "api", rules), WithoutMetadata(), WithoutPushback()))
		r := env.check(t)
		wantRateMD(t, r.header, -1, 0, 0)
		r = env.check(t)
		wantCode(t, r, codes.ResourceExhausted)
		wantRateMD(t, r.header, -1, 0, 0)
		if v := r.trailer.Get(TrailerPushback); len(v) != 0 {
			t.Fatalf("pushback trailer %q despite WithoutPushback", v)
		}
	})
}

func TestShadowRules(t *testing.T) {
	t.Run("log rule alone", func(t *testing.T) {
		env := start(t, unary(redisLimiter(t, "api", []ratelimit.Rule{rule("shadow", 1, time.Minute, ratelimit.ActionLog)})))
		for range 3 {
			r := env.check(t)
			wantCode(t, r, codes.OK)
			wantRateMD(t, r.header, -1, 0, 0) // a shadow rule changes nothing a client sees
		}
	})
	t.Run("metadata comes from the enforcing rule", func(t *testing.T) {
		env := start(t, unary(redisLimiter(t, "api", []ratelimit.Rule{
			rule("shadow", 1, time.Minute, ratelimit.ActionLog),
			rule("enforced", 10, time.Hour, ratelimit.ActionLimit),
		})))
		for i := range 3 {
			r := env.check(t)
			wantCode(t, r, codes.OK)
			wantRateMD(t, r.header, 10, 9-i, time.Hour)
		}
	})
}

func TestFailOpen(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	onRedis := func(name string, limit int64) *ratelimit.Limiter {
		// A stopped Redis refuses at once: no check needs the timeout to fail.
		return newLimiter(t, ratelimit.Config{Name: name, Store: redisstore.New(client), KeyPrefix: redistest.Prefix(t),
			Rules: []ratelimit.Rule{rule(name, limit, time.Minute, ratelimit.ActionLimit)}, Timeout: redisTimeout})
	}
	down := onRedis("one", 1)
	overBudget := onRedis("budget", 1)
	healthy := memLimiter(t, "healthy", []ratelimit.Rule{rule("many", 100, time.Minute, ratelimit.ActionLimit)})
	env := start(t, unary(healthy, WithLimiters(down)))

	r := env.check(t) // Redis up: counted, so a second call would be blocked
	wantCode(t, r, codes.OK)
	wantRateMD(t, r.header, 1, 0, time.Minute)
	overBudget.Check(context.Background(), nil, ratelimit.Cost(5))
	srv.Stop()
	// The failed limiter neither blocks nor speaks; the healthy one's
	// metadata is still sent, and it keeps counting. A check that waited on
	// the stopped Redis past the call's deadline would fail the code.
	for i := range 5 {
		r := env.check(t)
		wantCode(t, r, codes.OK)
		wantRateMD(t, r.header, 100, 100-2-i, time.Minute)
	}
	// Only failed limiters: no metadata at all.
	env = start(t, unary(down))
	r = env.check(t)
	wantCode(t, r, codes.OK)
	wantRateMD(t, r.header, -1, 0, 0)
	// A failed deferred limiter (over its budget when Redis was up) and a
	// failed counting one never block; a healthy limiter after them does.
	tight := memLimiter(t, "tight", []ratelimit.Rule{rule("tight", 1, time.Minute, ratelimit.ActionLimit)})
	env = start(t, unary(down, WithLimiters(tight), WithDeferred(CountCodes(overBudget, codes.OK))))
	r = env.check(t)
	wantCode(t, r, codes.OK)
	wantRateMD(t, r.header, 1, 0, time.Minute)
	r = env.check(t)
	wantCode(t, r, codes.ResourceExhausted)
	wantRateMD(t, r.header, 1, 0, time.Minute)
	if _, _, ei := details(t, r.err); ei.GetMetadata()["limiter"] != "tight" {
		t.Fatalf("blocked by %v, want the healthy limiter tight", ei.GetMetadata())
	}
}

func TestMultipleLimiters(t *testing.T) {
	general := redisLimiter(t, "grpc_request", []ratelimit.Rule{rule("per_ip", 100, time.Minute, ratelimit.ActionLimit, identifiers.IP)})
	protected := redisLimiter(t, "grpc_protected", []ratelimit.Rule{{
		Name: "check_per_ip", Match: map[string]ratelimit.Matcher{identifiers.GRPCMethod: ratelimit.Equal(healthCheck)},
		Characteristics: []string{identifiers.IP}, Limit: 1, Period: time.Minute,
	}})
	env := start(t, unary(general, WithLimiters(protected)))

	r := env.check(t)
	wantCode(t, r, codes.OK)
	wantRateMD(t, r.header, 1, 0, time.Minute) // the least remaining across limiters
	r = env.check(t)
	wantCode(t, r, codes.ResourceExhausted)
	if _, _, ei := details(t, r.err); ei.GetMetadata()["limiter"] != "grpc_protected" || ei.GetMetadata()["rule"] != "check_per_ip" {
		t.Fatalf("blocked by %v, want grpc_protected/check_per_ip", ei.GetMetadata())
	}
	r = env.list(t) // not a protected method: only the general limiter applies
	wantCode(t, r, codes.OK)
	wantRateMD(t, r.header, 100, 97, time.Minute)
}

func TestSkip(t *testing.T) {
	l := memLimiter(t, "api", []ratelimit.Rule{rule("one", 1, time.Minute, ratelimit.ActionLimit)})
	env := start(t, unary(l, WithSkip(SkipMethods(healthCheck))))
	for range 3 {
		r := env.check(t)
		wantCode(t, r, codes.OK)
		wantRateMD(t, r.header, -1, 0, 0)
	}
	wantCode(t, env.list(t), codes.OK)
	wantCode(t, env.list(t), codes.ResourceExhausted)
}

func TestIdentifierHooks(t *testing.T) {
	perUser := []ratelimit.Rule{rule("per_user", 1, time.Minute, ratelimit.ActionLimit, identifiers.User)}
	t.Run("default", func(t *testing.T) {
		rec := &recorder{}
		env := start(t, unary(memLimiter(t, "api", perUser, observed(rec.Observe))))
		wantCode(t, env.check(t), codes.OK)
		want := ratelimit.Identifier{identifiers.IP: "127.0.0.1", identifiers.IPFull: "127.0.0.1", identifiers.GRPCService: "grpc.health.v1.Health",
			identifiers.GRPCMethod: healthCheck, identifiers.Endpoint: healthCheck, identifiers.User: identifiers.Anonymous}
		if got := rec.last(t); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("identifier = %v, want %v", got, want)
		}
	})
	t.Run("properties from auth", func(t *testing.T) {
		props := func(ctx context.Context, call *Call, id ratelimit.Identifier) {
			if u := call.Metadata.Get("x-user"); len(u) == 1 {
				id[identifiers.User] = "user:" + u[0]
			}
		}
		env := start(t, unary(memLimiter(t, "api", perUser), WithProperties(props)))
		wantCode(t, env.check(t, "x-user", "alice"), codes.OK)
		wantCode(t, env.check(t, "x-user", "alice"), codes.ResourceExhausted)
		wantCode(t, env.check(t, "x-user", "bob"), codes.OK)
		wantCode(t, env.check(t), codes.OK) // anonymous
		wantCode(t, env.check(t), codes.ResourceExhausted)
	})
	t.Run("replaced", func(t *testing.T) {
		rec := &recorder{}
		ident := func(ctx context.Context, call *Call) ratelimit.Identifier {
			return ratelimit.Identifier{"tenant": call.Metadata.Get("x-tenant")[0], identifiers.GRPCMethod: call.FullMethod}
		}
		l := memLimiter(t, "api", []ratelimit.Rule{rule("per_tenant", 1, time.Minute, ratelimit.ActionLimit, "tenant")}, observed(rec.Observe))
		env := start(t, unary(l, WithIdentifier(ident)))
		wantCode(t, env.check(t, "x-tenant", "acme"), codes.OK)
		if got := fmt.Sprint(rec.last(t)); got != fmt.Sprint(ratelimit.Identifier{"tenant": "acme", identifiers.GRPCMethod: healthCheck}) {
			t.Fatalf("identifier = %s", got)
		}
		wantCode(t, env.check(t, "x-tenant", "acme"), codes.ResourceExhausted)
		wantCode(t, env.check(t, "x-tenant", "globex"), codes.OK)
	})
	t.Run("properties added to a replaced identifier", func(t *testing.T) {
		rec := &recorder{}
		ident := func(ctx context.Context, call *Call) ratelimit.Identifier {
			return ratelimit.Identifier{"tenant": call.Metadata.Get("x-tenant")[0]}
		}
		props := func(ctx context.Context, call *Call, id ratelimit.Identifier) {
			id[identifiers.User] = "user:" + call.Metadata.Get("x-user")[0]
		}
		l := memLimiter(t, "api", []ratelimit.Rule{rule("per_tenant_user", 1, time.Minute, ratelimit.ActionLimit, "tenant", identifiers.User)}, observed(rec.Observe))
		env := start(t, unary(l, WithIdentifier(ident), WithProperties(props)))
		wantCode(t, env.check(t, "x-tenant", "acme", "x-user", "alice"), codes.OK)
		if got, want := fmt.Sprint(rec.last(t)), fmt.Sprint(ratelimit.Identifier{"tenant": "acme", identifiers.User: "user:alice"}); got != want {
			t.Fatalf("identifier = %s, want %s", got, want)
		}
		wantCode(t, env.check(t, "x-tenant", "acme", "x-user", "alice"), codes.ResourceExhausted)
		wantCode(t, env.check(t, "x-tenant", "acme", "x-user", "bob"), codes.OK)
	})
}

// The clock of WithClock is read once per checked call, blocked or not, and
// the RetryInfo delay, the pushback trailer and the reset metadata all come
// from that one reading. The clock stands an hour back, so the reset is more
// than an hour away by it.
func TestClock(t *testing.T) {
	var reads atomic.Int64
	back := time.Now().Add(-time.Hour)
	clock := func() time.Time {
		reads.Add(1)
		return back
	}
	l := memLimiter(t, "grpc_request", []ratelimit.Rule{rule("per_ip", 1, time.Minute, ratelimit.ActionLimit, identifiers.IP)})
	env := start(t, unary(l, WithClock(clock), WithSkip(SkipMethods("/grpc.health.v1.Health/List"))))
	wantCode(t, env.check(t), codes.OK)
	if n := reads.Load(); n != 1 {
		t.Fatalf("clock read %d times for an allowed call, want 1", n)
	}
	r := env.check(t)
	wantCode(t, r, codes.ResourceExhausted)
	if n := reads.Load(); n != 2 {
		t.Fatalf("clock read %d times for a blocked call, want 1", n-1)
	}
	ri, _, _ := details(t, r.err)
	delay := ri.GetRetryDelay().AsDuration()
	if delay < time.Hour+time.Minute {
		t.Fatalf("RetryInfo delay = %v, want over 1h1m by the clock an hour back", delay)
	}
	if pb := r.trailer.Get(TrailerPushback); len(pb) != 1 || pb[0] != strconv.FormatInt(delay.Milliseconds(), 10) {
		t.Fatalf("pushback %q, RetryInfo %v", pb, delay)
	}
	if md := strings.Join(r.header.Get(MetadataRateLimit), ""); !strings.HasSuffix(md, ";t="+strconv.FormatInt(int64(delay/time.Second), 10)) {
		t.Fatalf("ratelimit metadata %q, want t= the RetryInfo delay %v", md, delay)
	}
	wantCode(t, env.list(t), codes.OK) // skipped: no check, no clock
	if n := reads.Load(); n != 2 {
		t.Fatalf("clock read for a skipped call (%d reads in all, want 2)", n)
	}
}

func TestTrustedProxies(t *testing.T) {
	tests := []struct {
		name    string
		trusted []string
		md      []string
		want    string
	}{
		{"untrusted peer: spoofed x-forwarded-for ignored", nil, []string{"x-forwarded-for", "203.0.113.9"}, "127.0.0.1"},
		{"untrusted peer: spoofed x-real-ip ignored", nil, []string{"x-real-ip", "203.0.113.9"}, "127.0.0.1"},
		{"other proxies trusted, not this peer", []string{"10.0.0.0/8"}, []string{"x-forwarded-for", "203.0.113.9"}, "127.0.0.1"},
		{"trusted peer: rightmost untrusted hop", []string{"127.0.0.1/32"}, []string{"x-forwarded-for", "198.51.100.1, 203.0.113.9"}, "203.0.113.9"},
		{"trusted peer and trusted hop skipped", []string{"127.0.0.1", "10.0.0.0/8"}, []string{"x-forwarded-for", "198.51.100.1, 10.1.2.3"}, "198.51.100.1"},
		{"trusted peer: x-real-ip, IPv6 keyed by its /64", []string{"127.0.0.0/8"}, []string{"x-real-ip", "2001:db8::7"}, "2001:db8::/64"},
		{"trusted peer without metadata", []string{"127.0.0.1"}, nil, "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			l := memLimiter(t, "api", []ratelimit.Rule{rule("per_ip", 10, time.Minute, ratelimit.ActionLimit, identifiers.IP)}, observed(rec.Observe))
			env := start(t, unary(l, WithTrustedProxies(identifiers.MustParseTrustedProxies(tt.trusted...))))
			wantCode(t, env.check(t, tt.md...), codes.OK)
			if got := rec.last(t)[identifiers.IP]; got != tt.want {
				t.Fatalf("ip = %v, want %s", got, tt.want)
			}
		})
	}
}

// TestForwardedUntrustedLogged: the first call that carries x-forwarded-for
// (or forwarded, x-real-ip) from a peer no trusted proxy covers is logged
// once (slog's default logger): behind a proxy nobody listed, every client
// shares the proxy's bucket, which nothing said. A trusted peer's is no news.
func TestForwardedUntrustedLogged(t *testing.T) {
	var buf testlog.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	l := memLimiter(t, "api", []ratelimit.Rule{rule("per_ip", 100, time.Minute, ratelimit.ActionLimit, identifiers.IP)})
	env := start(t, unary(l))
	wantCode(t, env.check(t), codes.OK)
	if got := buf.String(); got != "" {
		t.Fatalf("a call without forwarding metadata logged %q", got)
	}
	for range 3 {
		wantCode(t, env.check(t, "x-real-ip", "203.0.113.9"), codes.OK)
	}
	if got := buf.String(); strings.Count(got, "level=WARN") != 1 || !strings.Contains(got, "header=x-real-ip") || !strings.Contains(got, "peer=127.0.0.1") {
		t.Fatalf("three forwarded calls from an untrusted peer logged %q, want one warning naming the key and the peer", got)
	}
	buf.Reset()
	env = start(t, unary(l, WithTrustedProxies(identifiers.MustParseTrustedProxies("127.0.0.0/8"))))
	wantCode(t, env.check(t, "x-forwarded-for", "203.0.113.9"), codes.OK)
	if got := buf.String(); got != "" {
		t.Fatalf("a trusted proxy's forwarded call logged %q", got)
	}
}

// TestIPv6Prefix: the addresses of one IPv6 network are one client (/64 by
// default, WithIPv6Prefix's length otherwise), and ip_full keeps the address.
func TestIPv6Prefix(t *testing.T) {
	tests := []struct {
		name   string
		opts   []Option
		same   []string // addresses that share one counter
		other  string   // an address of another network
		wantIP string   // the ip property of same[0]
	}{
		{"default /64", nil, []string{"2001:db8::1", "2001:db8::2", "2001:db8::3"}, "2001:db8:0:1::1", "2001:db8::/64"},
		{"/56", []Option{WithIPv6Prefix(56)}, []string{"2001:db8:0:1::1", "2001:db8:0:2::1", "2001:db8:0:ff::1"}, "2001:db8:0:100::1", "2001:db8::/56"},
		{"/128", []Option{WithIPv6Prefix(128)}, []string{"2001:db8::1"}, "2001:db8::2", "2001:db8::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			n := int64(len(tt.same) - 1)
			l := memLimiter(t, "api", []ratelimit.Rule{rule("per_ip", max(n, 1), time.Minute, ratelimit.ActionLimit, identifiers.IP)}, observed(rec.Observe))
			opts := append([]Option{WithTrustedProxies(identifiers.MustParseTrustedProxies("127.0.0.0/8"))}, tt.opts...)
			env := start(t, unary(l, opts...))
			for i, a := range tt.same {
				want := codes.OK
				if int64(i) >= max(n, 1) {
					want = codes.ResourceExhausted
				}
				wantCode(t, env.check(t, "x-forwarded-for", a), want)
				if i == 0 {
					if id := rec.last(t); id[identifiers.IP] != tt.wantIP || id[identifiers.IPFull] != a {
						t.Fatalf("ip, ip_full = %v, %v; want %s, %s", id[identifiers.IP], id[identifiers.IPFull], tt.wantIP, a)
					}
				}
			}
			wantCode(t, env.check(t, "x-forwarded-for", tt.other), codes.OK)
		})
	}
	defer func() {
		if recover() == nil {
			t.Error("WithIPv6Prefix(129) did not panic")
		}
	}()
	WithIPv6Prefix(129)
}

func TestWithCost(t *testing.T) {
	l := memLimiter(t, "api", []ratelimit.Rule{rule("budget", 3, time.Minute, ratelimit.ActionLimit)})
	cost := func(_ context.Context, call *Call) float64 {
		if call.Method == "Check" {
			return 2
		}
		return 1
	}
	env := start(t, unary(l, WithCost(cost)))
	wantCode(t, env.check(t), codes.OK) // 2
	wantCode(t, env.list(t), codes.OK)  // 3
	wantCode(t, env.check(t), codes.ResourceExhausted)
}

// A call whose cost alone is over its rule can never pass: it gets no
// RetryInfo and a negative pushback, which tells a gRPC client not to retry
// (gRFC A6), while one that only has to wait is told when.
func TestCostThatNeverPassesSaysDoNotRetry(t *testing.T) {
	tests := []struct {
		name  string
		cost  float64
		never bool
	}{
		{"cost over the limit", 4, true},
		{"cost at the limit", 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := memLimiter(t, "api", []ratelimit.Rule{rule("budget", 3, time.Minute, ratelimit.ActionLimit)})
			env := start(t, unary(l, WithCost(func(context.Context, *Call) float64 { return tt.cost })))
			r := env.check(t)
			if !tt.never {
				wantCode(t, r, codes.OK)
				r = env.check(t)
			}
			wantCode(t, r, codes.ResourceExhausted)
			ri, _, ei := details(t, r.err)
			if (ri == nil) != tt.never {
				t.Errorf("RetryInfo %v, want one: %v", ri, !tt.never)
			}
			pb := r.trailer.Get(TrailerPushback)
			if len(pb) != 1 || strings.HasPrefix(pb[0], "-") != tt.never {
				t.Errorf("%s = %q, want negative: %v", TrailerPushback, pb, tt.never)
			}
			if got := ei.GetMetadata()["never"]; got != strconv.FormatBool(tt.never) {
				t.Errorf("ErrorInfo never = %q, want %v", got, tt.never)
			}
		})
	}
}

func TestMeteredLimiter(t *testing.T) {
	general := memLimiter(t, "api", []ratelimit.Rule{rule("many", 100, time.Minute, ratelimit.ActionLimit)})
	db := redisLimiter(t, "db_utilization", []ratelimit.Rule{rule("db_seconds_per_user", 5, time.Minute, ratelimit.ActionLimit, identifiers.User)})
	env := start(t, unary(general, WithDeferred(Metered(db, "db_s"))))

	r := env.do(t, "cost=3") // peek 0 <= 5, then 3 counted
	wantCode(t, r, codes.OK)
	// The metered limiter's unit is not requests: the metadata of allowed calls
	// describes the request limiters only.
	wantRateMD(t, r.header, 100, 99, time.Minute)
	wantCode(t, env.do(t, "cost=3.5"), codes.OK) // peek 3 <= 5, then 6.5: over budget now
	r = env.do(t, "cost=1")
	wantCode(t, r, codes.ResourceExhausted)
	if _, qf, _ := details(t, r.err); qf.GetViolations()[0].GetQuotaMetric() != "db_utilization" {
		t.Fatalf("blocked by %v, want db_utilization", qf.GetViolations()[0])
	}
	if n := env.work.calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (the third call was rejected before it)", n)
	}
	res := db.Peek(context.Background(), ratelimit.Identifier{identifiers.User: identifiers.Anonymous}, ratelimit.Cost(0))
	if res.Info == nil || res.Info.Count != 6.5 {
		t.Fatalf("db counter = %+v, want 6.5 (the metered costs)", res.Info)
	}
}

func TestOutcomeLimiter(t *testing.T) {
	general := memLimiter(t, "api", []ratelimit.Rule{rule("many", 100, time.Minute, ratelimit.ActionLimit)})
	failures := redisLimiter(t, "login_failures", []ratelimit.Rule{rule("failed_logins", 2, time.Minute, ratelimit.ActionLimit, identifiers.IP)})
	env := start(t, unary(general, WithDeferred(CountCodes(failures, codes.Unauthenticated)), WithoutMetadata()))

	for range 3 {
		wantCode(t, env.do(t, "login"), codes.OK) // successes are not counted
	}
	wantCode(t, env.do(t, "fail"), codes.Unauthenticated)
	wantCode(t, env.do(t, "fail"), codes.Unauthenticated)
	r := env.do(t, "login") // 2 failures: the next attempt is refused, whatever it would do
	wantCode(t, r, codes.ResourceExhausted)
	if _, _, ei := details(t, r.err); ei.GetMetadata()["rule"] != "failed_logins" {
		t.Fatalf("blocked by %v", ei.GetMetadata())
	}
	if n := env.work.calls.Load(); n != 5 {
		t.Fatalf("handler ran %d times, want 5", n)
	}
}

// A handler that panics after doing work is charged what it metered, and
// counts as Internal (what the recovery interceptor outside answers).
func TestDeferredChargedWhenHandlerPanics(t *testing.T) {
	db := redisLimiter(t, "db_utilization", []ratelimit.Rule{rule("db_seconds_per_user", 100, time.Minute, ratelimit.ActionLimit, identifiers.User)})
	internal := redisLimiter(t, "internal_errors", []ratelimit.Rule{rule("internal_per_user", 100, time.Minute, ratelimit.ActionLimit, identifiers.User)})
	recovery := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = status.Errorf(codes.Internal, "panic: %v", r)
			}
		}()
		return h(ctx, req)
	}
	env := start(t, grpc.ChainUnaryInterceptor(recovery, UnaryServerInterceptor(
		memLimiter(t, "api", []ratelimit.Rule{rule("many", 100, time.Minute, ratelimit.ActionLimit)}),
		WithDeferred(Metered(db, "db_s"), CountCodes(internal, codes.Internal)))))

	wantCode(t, env.do(t, "panic"), codes.Internal)
	id := ratelimit.Identifier{identifiers.User: identifiers.Anonymous}
	if res := db.Peek(context.Background(), id, ratelimit.Cost(0)); res.Info == nil || res.Info.Count != 2 {
		t.Errorf("db counter = %+v, want 2 (metered before the panic)", res.Info)
	}
	if res := internal.Peek(context.Background(), id, ratelimit.Cost(0)); res.Info == nil || res.Info.Count != 1 {
		t.Errorf("internal errors counter = %+v, want 1", res.Info)
	}
}

func TestStream(t *testing.T) {
	l := redisLimiter(t, "grpc_request", []ratelimit.Rule{rule("per_ip", 1, time.Minute, ratelimit.ActionLimit, identifiers.IP)})
	rec := &recorder{}
	counted := memLimiter(t, "seen", []ratelimit.Rule{rule("all", 100, time.Minute, ratelimit.ActionLimit)}, observed(rec.Observe))
	env := start(t, grpc.ChainStreamInterceptor(StreamServerInterceptor(l, WithLimiters(counted))))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s1, err := env.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	h, err := s1.Header()
	if err != nil {
		t.Fatal(err)
	}
	wantRateMD(t, h, 1, 0, time.Minute)
	if id := rec.last(t); id[identifiers.GRPCMethod] != "/grpc.health.v1.Health/Watch" {
		t.Fatalf("stream identifier %v", id)
	}

	s2, err := env.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s2.Recv()
	wantCode(t, reply{err: err}, codes.ResourceExhausted)
	ri, _, _ := details(t, err)
	if got := s2.Trailer().Get(TrailerPushback); len(got) != 1 || got[0] != strconv.FormatInt(ri.GetRetryDelay().AsDuration().Milliseconds(), 10) {
		t.Fatalf("pushback trailer %q", got)
	}
	// Messages on an open stream are not checked again: the first stream lives on.
	cancel()
	if _, err := s1.Recv(); status.Code(err) != codes.Canceled && !errors.Is(err, io.EOF) {
		t.Fatalf("first stream after cancel: %v", err)
	}
}

func TestStreamMeter(t *testing.T) {
	general := memLimiter(t, "api", []ratelimit.Rule{rule("many", 100, time.Minute, ratelimit.ActionLimit)})
	db := memLimiter(t, "db", []ratelimit.Rule{rule("db_s", 1, time.Minute, ratelimit.ActionLimit)})
	var sawMeter bool
	spy := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		sawMeter = adapter.MeterFrom(ss.Context()) != nil
		adapter.AddCost(ss.Context(), "db_s", 2)
		return handler(srv, ss)
	}
	env := start(t, grpc.ChainStreamInterceptor(StreamServerInterceptor(general, WithDeferred(Metered(db, "db_s"))), spy))
	ctx, cancel := context.WithCancel(context.Background())
	s, err := env.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel() // ends the stream; the cost is charged after the handler returns
	// An eventual condition: 10s, for a loaded CI machine.
	deadline := time.Now().Add(10 * time.Second)
	for {
		res := db.Peek(context.Background(), nil, ratelimit.Cost(0))
		if res.Info != nil && res.Info.Count == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("db counter %+v, want 2 after the stream ended", res.Info)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !sawMeter {
		t.Fatal("the stream handler's context carried no meter")
	}
	s2, err := env.health.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s2.Recv()
	wantCode(t, reply{err: err}, codes.ResourceExhausted)
}

func TestSplitMethod(t *testing.T) {
	tests := []struct{ full, service, method string }{
		{healthCheck, "grpc.health.v1.Health", "Check"},
		{"/Svc/M", "Svc", "M"},
		{"noslash", "", "noslash"},
		{"", "", ""},
	}
	for _, tt := range tests {
		s, m := splitMethod(tt.full)
		if s != tt.service || m != tt.method {
			t.Errorf("splitMethod(%q) = %q, %q; want %q, %q", tt.full, s, m, tt.service, tt.method)
		}
	}
}

func TestCountCodes(t *testing.T) {
	l := memLimiter(t, "a", nil)
	d := CountCodes(l, codes.Unauthenticated, codes.PermissionDenied)
	if d.Limiter != l || d.PeekCost != 1 {
		t.Fatalf("CountCodes = %+v, want the limiter and PeekCost 1", d)
	}
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{status.Error(codes.Unauthenticated, "x"), true},
		{status.Error(codes.PermissionDenied, "x"), true},
		{status.Error(codes.Internal, "x"), false},
		{errors.New("plain"), false},
	}
	for _, tt := range tests {
		cost, ok := d.Charge(context.Background(), Outcome{Call: &Call{}, Err: tt.err})
		if ok != tt.want || cost != 1 {
			t.Errorf("Charge(%v) = %v, %v; want 1, %v", tt.err, cost, ok, tt.want)
		}
	}
}

func TestNilLimiterPanics(t *testing.T) {
	for name, tc := range map[string]struct {
		f    func()
		want string // in the panic
	}{
		"unary":        {func() { UnaryServerInterceptor(nil) }, "no limiter"},
		"stream":       {func() { StreamServerInterceptor(nil) }, "no limiter"},
		"with limiter": {func() { UnaryServerInterceptor(memLimiter(t, "a", nil), WithLimiters(nil)) }, "limiter 1 is nil"},
		"deferred":     {func() { UnaryServerInterceptor(memLimiter(t, "a", nil), WithDeferred(Metered(nil, "x"))) }, "deferred limiter 0"},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if msg := fmt.Sprint(recover()); !strings.HasPrefix(msg, "ratelimitgrpc: ") || !strings.Contains(msg, tc.want) {
					t.Fatalf("panic %q, want one from ratelimitgrpc naming %q", msg, tc.want)
				}
			}()
			tc.f()
		})
	}
}

// TestCallerGone: a call whose caller went away during its checks (its
// context ended: the check fails open with ratelimit.ErrCanceled, counting
// nothing) does not run the handler, as the HTTP adapters and the Envoy
// service: a client over its limit would otherwise have it run, uncounted, by
// canceling during the check. It fails with the context's code.
func TestCallerGone(t *testing.T) {
	ran := 0
	handler := func(context.Context, any) (any, error) { ran++; return "ok", nil }
	info := &grpc.UnaryServerInfo{FullMethod: workDo}
	p := &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 50000}}
	for _, tc := range []struct {
		name   string
		opt    func(l *ratelimit.Limiter) Option
		charge string // what the first call adds to the meter
	}{
		{"limiter", func(l *ratelimit.Limiter) Option { return WithLimiters(l) }, ""},
		{"deferred limiter", func(l *ratelimit.Limiter) Option { return WithDeferred(Metered(l, "db_s")) }, "db_s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran = 0
			l := memLimiter(t, "a", []ratelimit.Rule{rule("per_ip", 1, time.Minute, ratelimit.ActionLimit, identifiers.IP)})
			ic := UnaryServerInterceptor(nil, tc.opt(l))
			first := func(ctx context.Context, req any) (any, error) {
				adapter.AddCost(ctx, "db_s", 2) // over the budget once charged
				return handler(ctx, req)
			}
			if _, err := ic(peer.NewContext(context.Background(), p), nil, info, first); err != nil {
				t.Fatalf("first call: %v", err)
			}
			ctx, cancel := context.WithCancel(peer.NewContext(context.Background(), p))
			cancel()
			_, err := ic(ctx, nil, info, handler)
			if ran != 1 {
				t.Errorf("the handler ran %d times, want 1: not for the call whose caller went away", ran)
			}
			if status.Code(err) != codes.Canceled {
				t.Errorf("the call whose caller went away got %v, want Canceled", err)
			}
		})
	}
}

// TestNilLimiterWithOptions: as in the HTTP adapters, the limiter may be nil
// when the options give every limiter, an outcome limiter alone included
// (failed logins), with no request limiter of no rules beside it.
func TestNilLimiterWithOptions(t *testing.T) {
	login := func(context.Context, any) (any, error) {
		return nil, status.Error(codes.Unauthenticated, "bad password")
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 50000}})
	info := &grpc.UnaryServerInfo{FullMethod: "/acme.Auth/Login"}
	for name, opt := range map[string]func(l *ratelimit.Limiter) Option{
		"WithLimiters": func(l *ratelimit.Limiter) Option { return WithLimiters(l) },
		"WithDeferred": func(l *ratelimit.Limiter) Option { return WithDeferred(CountCodes(l, codes.Unauthenticated)) },
	} {
		t.Run(name, func(t *testing.T) {
			l := memLimiter(t, "login", []ratelimit.Rule{rule("per_ip", 2, time.Minute, ratelimit.ActionLimit, identifiers.IP)})
			ic := UnaryServerInterceptor(nil, opt(l))
			_ = StreamServerInterceptor(nil, opt(l))
			var got []codes.Code
			for range 3 {
				_, err := ic(ctx, nil, info, login)
				got = append(got, status.Code(err))
			}
			want := []codes.Code{codes.Unauthenticated, codes.Unauthenticated, codes.ResourceExhausted}
			if !slices.Equal(got, want) {
				t.Fatalf("codes %v, want %v", got, want)
			}
		})
	}
}

// The header metadata follows the HTTP adapters' profiles, on allowed and
// blocked calls; IETF is the default.
func TestHeaderProfiles(t *testing.T) {
	for _, tt := range []struct {
		profile ratelimitheaders.Profile
		want    map[string]*regexp.Regexp // key: value on the second (blocked) call
	}{
		{ratelimitheaders.IETF, map[string]*regexp.Regexp{
			MetadataPolicy: regexp.MustCompile(`^"per_ip";q=1;w=60$`), MetadataRateLimit: regexp.MustCompile(`^"per_ip";r=0;t=([1-9]|[1-5][0-9]|60)$`)}},
		{ratelimitheaders.Legacy, map[string]*regexp.Regexp{
			MetadataLimit: regexp.MustCompile(`^1$`), MetadataRemaining: regexp.MustCompile(`^0$`), MetadataReset: regexp.MustCompile(`^([1-9]|[1-5][0-9]|60)$`)}},
		{ratelimitheaders.GitLab, map[string]*regexp.Regexp{
			"ratelimit-name": regexp.MustCompile(`^per_ip$`), MetadataLimit: regexp.MustCompile(`^1$`), "ratelimit-observed": regexp.MustCompile(`^2$`),
			MetadataRemaining: regexp.MustCompile(`^0$`), MetadataReset: regexp.MustCompile(`^\d{10}$`), "ratelimit-resettime": regexp.MustCompile(` GMT$`)}},
		{ratelimitheaders.None, nil},
	} {
		t.Run(tt.profile.String(), func(t *testing.T) {
			l := memLimiter(t, "grpc_request", []ratelimit.Rule{rule("per_ip", 1, time.Minute, ratelimit.ActionLimit, identifiers.IP)})
			opts := []Option{WithHeaderProfile(tt.profile)}
			if tt.profile == ratelimitheaders.IETF {
				opts = nil // the default
			}
			env := start(t, unary(l, opts...))
			wantCode(t, env.check(t), codes.OK)
			r := env.check(t)
			wantCode(t, r, codes.ResourceExhausted)
			var got []string
			for k := range r.header {
				if strings.HasPrefix(k, "ratelimit") || k == "retry-after" || k == "cache-control" {
					got = append(got, k)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("rate-limit metadata keys %q, want those of %v", got, tt.want)
			}
			for k, re := range tt.want {
				if v := r.header.Get(k); len(v) != 1 || !re.MatchString(v[0]) {
					t.Fatalf("%s = %q, want %v", k, v, re)
				}
			}
			if v := r.trailer.Get(TrailerPushback); len(v) != 1 {
				t.Fatalf("pushback trailer %q: the profile must not change it", v)
			}
		})
	}
}

// With WithRetryJitter, RetryInfo and the pushback trailer of each blocked
// call lie between the real reset (the t= of the call's ratelimit metadata)
// and the reset plus the jitter, agree with each other, and vary.
// farStore answers every op over its limit until ttl from now, as a store
// does for a wait as long as a Duration can hold.
type farStore struct{ ttl time.Duration }

func (s farStore) Eval(_ context.Context, _ ratelimit.Mode, ops []ratelimit.Op) ([]ratelimit.OpResult, error) {
	out := make([]ratelimit.OpResult, len(ops))
	for i, op := range ops {
		out[i] = ratelimit.OpResult{Evaluated: true, Count: float64(op.Limit) + 1, TTL: s.ttl, Exceeded: true}
	}
	return out, nil
}

func (farStore) Delete(context.Context, []string) (int, error) { return 0, nil }

// The jitter added to a wait near the longest Duration saturates: a sum past
// it overflowed into a negative RetryInfo and pushback, "retry at once".
func TestRetryJitterSaturates(t *testing.T) {
	longest := math.MaxInt64 / time.Second * time.Second
	l := newLimiter(t, ratelimit.Config{Name: "grpc_request", Store: farStore{ttl: longest - 2*time.Second},
		Rules:        []ratelimit.Rule{rule("per_ip", 1, time.Minute, ratelimit.ActionLimit, identifiers.IP)},
		BlockedCache: ratelimit.BlockedCacheConfig{Size: -1}})
	env := start(t, unary(l, WithRetryJitter(30*time.Second)))
	for range 10 { // random jitters of 0 to 30 s: nine in ten overflowed
		r := env.check(t)
		wantCode(t, r, codes.ResourceExhausted)
		ri, _, _ := details(t, r.err)
		if d := ri.GetRetryDelay().AsDuration(); d < longest-2*time.Second || d > longest {
			t.Fatalf("RetryInfo delay %v, want [%v, %v]", d, longest-2*time.Second, longest)
		}
		if pb := r.trailer.Get(TrailerPushback); len(pb) != 1 || strings.HasPrefix(pb[0], "-") {
			t.Fatalf("pushback %q, want a positive delay", pb)
		}
	}
}

func TestRetryJitter(t *testing.T) {
	const jitter = 30
	l := memLimiter(t, "grpc_request", []ratelimit.Rule{rule("per_ip", 1, time.Minute, ratelimit.ActionLimit, identifiers.IP)})
	env := start(t, unary(l, WithRetryJitter(jitter*time.Second)))
	wantCode(t, env.check(t), codes.OK)
	tRe := regexp.MustCompile(`;t=(\d+)$`)
	seen := map[int64]bool{}
	for range 40 {
		r := env.check(t)
		wantCode(t, r, codes.ResourceExhausted)
		m := tRe.FindStringSubmatch(strings.Join(r.header.Get(MetadataRateLimit), ""))
		if m == nil {
			t.Fatalf("ratelimit metadata %q", r.header.Get(MetadataRateLimit))
		}
		reset, _ := strconv.ParseInt(m[1], 10, 64)
		ri, _, _ := details(t, r.err)
		delay := int64(ri.GetRetryDelay().AsDuration() / time.Second)
		if delay < reset || delay > reset+jitter {
			t.Fatalf("RetryInfo delay %ds, want [%d, %d]", delay, reset, reset+jitter)
		}
		if pb := r.trailer.Get(TrailerPushback); len(pb) != 1 || pb[0] != strconv.FormatInt(delay*1000, 10) {
			t.Fatalf("pushback %q, RetryInfo %ds", pb, delay)
		}
		seen[delay-reset] = true
	}
	if len(seen) < 2 {
		t.Fatalf("no jitter: extra delays %v", seen)
	}
}
