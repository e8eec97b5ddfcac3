package adaptertest

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/guard"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
	"github.com/redis/go-redis/v9"
)

func testAllowAndBlock(s *suite) {
	srv := s.serve(Setup{Limiters: []*ratelimit.Limiter{s.limiter("http", perIP("per_ip", 5, time.Minute))}})
	for i := int64(1); i <= 5; i++ {
		r := s.do(srv, "GET", "/hello")
		s.allowed(r, "hello")
		s.ietf(r, "per_ip", 5, 60, 5-i)
	}
	r := s.do(srv, "GET", "/hello")
	ra := s.blocked(r, 60, "per_ip")
	if t := s.ietf(r, "per_ip", 5, 60, 0); t != ra {
		s.t.Errorf("RateLimit t=%d differs from Retry-After %d for the same rule", t, ra)
	}
	if n := s.calls["/hello"].Load(); n != 5 {
		s.t.Errorf("handler ran %d times, want 5: a blocked request reached it", n)
	}
}

func testProfileLegacy(s *suite) {
	srv := s.serve(Setup{Profile: ratelimitheaders.Legacy, Limiters: []*ratelimit.Limiter{s.limiter("http", perIP("per_ip", 2, time.Minute))}})
	r := s.do(srv, "GET", "/hello")
	s.allowed(r, "hello")
	s.header(r, "RateLimit-Limit", "2")
	s.header(r, "RateLimit-Remaining", "1")
	s.intHeader(r, "RateLimit-Reset", 59, 60) // delta seconds, not an epoch
	s.noHeader(r, "RateLimit", "RateLimit-Policy", "RateLimit-Name", "RateLimit-Observed")
	s.do(srv, "GET", "/hello")
	r = s.do(srv, "GET", "/hello")
	ra := s.blocked(r, 60, "per_ip")
	s.header(r, "RateLimit-Limit", "2")
	s.header(r, "RateLimit-Remaining", "0")
	if reset := s.intHeader(r, "RateLimit-Reset", 1, 60); reset != ra {
		s.t.Errorf("RateLimit-Reset %d differs from Retry-After %d", reset, ra)
	}
}

func testProfileGitLab(s *suite) {
	srv := s.serve(Setup{Profile: ratelimitheaders.GitLab, Limiters: []*ratelimit.Limiter{
		s.limiter("http", perIP("throttle_unauthenticated", 4, 2*time.Minute)),
	}})
	r := s.do(srv, "GET", "/hello")
	s.allowed(r, "hello")
	s.header(r, "RateLimit-Name", "throttle_unauthenticated")
	s.header(r, "RateLimit-Limit", "2") // normalised to 60 s: ceil(4*60/120)
	s.header(r, "RateLimit-Observed", "1")
	s.header(r, "RateLimit-Remaining", "3")
	s.epochNear(r, "RateLimit-Reset", 119*time.Second, 120*time.Second) // epoch seconds
	s.noHeader(r, "RateLimit", "RateLimit-Policy", "RateLimit-ResetTime")
	for i := 0; i < 3; i++ {
		s.status(s.do(srv, "GET", "/hello"), http.StatusOK)
	}
	r = s.do(srv, "GET", "/hello")
	ra := s.blocked(r, 120, "throttle_unauthenticated")
	s.header(r, "RateLimit-Observed", "5")
	s.header(r, "RateLimit-Remaining", "0")
	reset := s.epochNear(r, "RateLimit-Reset", time.Duration(ra-1)*time.Second, time.Duration(ra)*time.Second)
	rt, err := http.ParseTime(r.header.Get("RateLimit-ResetTime"))
	if err != nil {
		s.t.Fatalf("RateLimit-ResetTime %q is not an HTTP-date: %v", r.header.Get("RateLimit-ResetTime"), err)
	}
	if rt.Unix() != reset {
		s.t.Errorf("RateLimit-ResetTime %v is not RateLimit-Reset %d", rt, reset)
	}
}

func testProfileNone(s *suite) {
	srv := s.serve(Setup{Profile: ratelimitheaders.None, Limiters: []*ratelimit.Limiter{s.limiter("http", perIP("per_ip", 1, time.Minute))}})
	r := s.do(srv, "GET", "/hello")
	s.allowed(r, "hello")
	s.noHeader(r, rateLimitHeaders...)
	r = s.do(srv, "GET", "/hello")
	s.blocked(r, 60, "per_ip")
	s.noHeader(r, rateLimitHeaders...)
}

func testShadow(s *suite) {
	shadow := perIP("shadow_tight", 1, time.Minute)
	shadow.Action = ratelimit.ActionLog
	mixed := s.limiter("mixed", shadow, perIP("enforced", 100, time.Hour))
	shadowOnly := s.limiter("shadow_only", shadow)
	srv := s.serve(Setup{Limiters: []*ratelimit.Limiter{mixed, shadowOnly}})
	for i := int64(1); i <= 3; i++ {
		r := s.do(srv, "GET", "/hello")
		s.allowed(r, "hello") // the exceeded shadow rules never block
		s.ietf(r, "enforced", 100, 3600, 100-i)
	}
	// A limiter with shadow rules only never sends headers.
	srv = s.serve(Setup{Limiters: []*ratelimit.Limiter{s.limiter("shadow_alone", shadow)}})
	for i := 0; i < 3; i++ {
		r := s.do(srv, "GET", "/hello")
		s.allowed(r, "hello")
		s.noHeader(r, rateLimitHeaders...)
	}
	// The shadow rules did count and exceed: the limiter reports it.
	res := shadowOnly.Peek(context.Background(), ratelimit.Identifier{identifiers.IP: "127.0.0.1"}, ratelimit.Cost(0))
	if !res.Exceeded || res.Blocked() {
		s.t.Errorf("shadow rule: exceeded=%v blocked=%v, want exceeded and not blocked", res.Exceeded, res.Blocked())
	}
}

func testMultipleLimiters(s *suite) {
	general := s.limiter("rack_request", perIP("general", 10, time.Minute))
	protected := perIP("protected_paths", 2, time.Minute)
	protected.Match = map[string]ratelimit.Matcher{identifiers.Path: ratelimit.Regex(`^/login$`)}
	srv := s.serve(Setup{Limiters: []*ratelimit.Limiter{general, s.limiter("rack_request_protected_paths", protected)}})

	r := s.do(srv, "POST", "/login", "X-Password", "right")
	s.allowed(r, "welcome")
	s.ietf(r, "protected_paths", 2, 60, 1) // the most constraining of both limiters
	s.status(s.do(srv, "POST", "/login", "X-Password", "right"), http.StatusOK)
	r = s.do(srv, "POST", "/login", "X-Password", "right")
	s.blocked(r, 60, "protected_paths")
	s.ietf(r, "protected_paths", 2, 60, 0)
	// Other paths only meet the general limiter, which counted every login.
	r = s.do(srv, "GET", "/hello")
	s.allowed(r, "hello")
	s.ietf(r, "general", 10, 60, 6)
}

func testFirstBlockEndsChecks(s *suite) {
	tight := s.limiter("tight", perIP("one", 1, time.Minute))
	other := s.limiter("other", perIP("five", 5, time.Minute))
	srv := s.serve(Setup{Limiters: []*ratelimit.Limiter{tight, other}})
	s.status(s.do(srv, "GET", "/hello"), http.StatusOK)
	s.blocked(s.do(srv, "GET", "/hello"), 60, "one")
	if c := s.count(other); c != 1 {
		s.t.Errorf("second limiter count = %v, want 1: it counted a request the first limiter rejected", c)
	}
}

func testSkip(s *suite) {
	srv := s.serve(Setup{
		Limiters: []*ratelimit.Limiter{s.limiter("http", perIP("per_ip", 1, time.Minute))},
		Skip:     func(r *http.Request) bool { return r.URL.Path == "/health" },
	})
	for i := 0; i < 3; i++ {
		r := s.do(srv, "GET", "/health")
		s.allowed(r, "ok")
		s.noHeader(r, rateLimitHeaders...)
	}
	s.status(s.do(srv, "GET", "/hello"), http.StatusOK)
	s.blocked(s.do(srv, "GET", "/hello"), 60, "per_ip")
	s.allowed(s.do(srv, "GET", "/health"), "ok")
}

func testCustomIdentifier(s *suite) {
	rule := ratelimit.Rule{Name: "per_tenant", Characteristics: []string{"tenant"},
		Limit: 1, Period: time.Minute}
	srv := s.serve(Setup{
		Limiters: []*ratelimit.Limiter{s.limiter("http", rule)},
		Identifier: func(r *http.Request) ratelimit.Identifier {
			return ratelimit.Identifier{"tenant": r.Header.Get("X-Tenant")}
		},
	})
	s.status(s.do(srv, "GET", "/hello", "X-Tenant", "a"), http.StatusOK)
	s.blocked(s.do(srv, "GET", "/hello", "X-Tenant", "a"), 60, "per_tenant")
	s.status(s.do(srv, "GET", "/hello", "X-Tenant", "b"), http.StatusOK)
	if id := s.lastIdentifier(); !reflect.DeepEqual(id, ratelimit.Identifier{"tenant": "b"}) {
		s.t.Errorf("identifier = %v, want only the custom one", id)
	}
}

func testProperties(s *suite) {
	anon := perIP("unauthenticated", 1, time.Minute)
	anon.Match = map[string]ratelimit.Matcher{identifiers.User: ratelimit.Equal(identifiers.Anonymous)}
	authed := ratelimit.Rule{Name: "authenticated", Characteristics: []string{identifiers.User},
		Limit: 2, Period: time.Minute}
	srv := s.serve(Setup{
		Limiters: []*ratelimit.Limiter{s.limiter("http", anon, authed)},
		Properties: func(r *http.Request, id ratelimit.Identifier) {
			if u := r.Header.Get("X-User"); u != "" {
				id[identifiers.User] = "user:" + u
			}
		},
	})
	s.status(s.do(srv, "GET", "/hello"), http.StatusOK)
	s.blocked(s.do(srv, "GET", "/hello"), 60, "unauthenticated")
	for i := 0; i < 2; i++ {
		s.status(s.do(srv, "GET", "/hello", "X-User", "1"), http.StatusOK)
	}
	s.blocked(s.do(srv, "GET", "/hello", "X-User", "1"), 60, "authenticated")
	s.status(s.do(srv, "GET", "/hello", "X-User", "2"), http.StatusOK)
	if id := s.lastIdentifier(); id[identifiers.User] != "user:2" || id[identifiers.IP] != "127.0.0.1" {
		s.t.Errorf("identifier = %v, want user:2 from the hook beside the default properties", id)
	}
}

// testPropertiesWithIdentifier: the properties hook adds to a custom
// identifier as it does to the default one.
func testPropertiesWithIdentifier(s *suite) {
	rule := ratelimit.Rule{Name: "per_tenant_user", Characteristics: []string{"tenant", identifiers.User},
		Limit: 1, Period: time.Minute}
	srv := s.serve(Setup{
		Limiters: []*ratelimit.Limiter{s.limiter("http", rule)},
		Identifier: func(r *http.Request) ratelimit.Identifier {
			return ratelimit.Identifier{"tenant": r.Header.Get("X-Tenant")}
		},
		Properties: func(r *http.Request, id ratelimit.Identifier) {
			id[identifiers.User] = "user:" + r.Header.Get("X-User")
		},
	})
	s.status(s.do(srv, "GET", "/hello", "X-Tenant", "a", "X-User", "1"), http.StatusOK)
	s.blocked(s.do(srv, "GET", "/hello", "X-Tenant", "a", "X-User", "1"), 60, "per_tenant_user")
	s.status(s.do(srv, "GET", "/hello", "X-Tenant", "a", "X-User", "2"), http.StatusOK)
	want := ratelimit.Identifier{"tenant": "a", identifiers.User: "user:2"}
	if id := s.lastIdentifier(); !reflect.DeepEqual(id, want) {
		s.t.Errorf("identifier = %v, want %v: the custom identifier and the hook's properties", id, want)
	}
}

// testRequestCost: the cost hook weighs each request before the handler.
func testRequestCost(s *suite) {
	l := s.limiter("http", perIP("per_ip", 5, time.Minute))
	srv := s.serve(Setup{
		Limiters: []*ratelimit.Limiter{l},
		Cost: func(r *http.Request) float64 {
			if r.URL.Path == "/work" {
				return 3
			}
			return 1
		},
	})
	s.allowed(s.do(srv, "GET", "/hello"), "hello")
	s.allowed(s.do(srv, "GET", "/work"), "worked")
	if c := s.count(l); c != 4 {
		s.t.Fatalf("counted %v, want 4 (1 + 3)", c)
	}
	s.blocked(s.do(srv, "GET", "/work"), 60, "per_ip") // 4 + 3 is over 5
	if n := s.calls["/work"].Load(); n != 1 {
		s.t.Errorf("/work ran %d times, want 1", n)
	}
}

// testClock: the adapter renders the verdict with its clock, read once per
// checked request (so once per 429) and never for a skipped one. The clock
// stands an hour back, so the reset is more than an hour away by it.
func testClock(s *suite) {
	var reads atomic.Int64
	back := time.Now().Add(-time.Hour)
	srv := s.serve(Setup{
		Limiters: []*ratelimit.Limiter{s.limiter("http", perIP("per_ip", 1, time.Minute))},
		Skip:     func(r *http.Request) bool { return r.URL.Path == "/health" },
		Now: func() time.Time {
			reads.Add(1)
			return back
		},
	})
	s.status(s.do(srv, "GET", "/hello"), http.StatusOK)
	if n := reads.Load(); n != 1 {
		s.t.Errorf("clock read %d times for an allowed request, want 1", n)
	}
	r := s.do(srv, "GET", "/hello")
	s.status(r, http.StatusTooManyRequests)
	if n := reads.Load(); n != 2 {
		s.t.Errorf("clock read %d times for a 429, want 1", n-1)
	}
	s.intHeader(r, ratelimitheaders.HeaderRetryAfter, 3660, 1<<40)
	s.allowed(s.do(srv, "GET", "/health"), "ok")
	if n := reads.Load(); n != 2 {
		s.t.Errorf("clock read for a skipped request (%d reads in all, want 2)", n)
	}
}

func testTrustedProxies(s *suite) {
	// Nobody trusted: a spoofed X-Forwarded-For does not give a new bucket.
	srv := s.serve(Setup{Limiters: []*ratelimit.Limiter{s.limiter("untrusted", perIP("per_ip", 1, time.Minute))}})
	s.status(s.do(srv, "GET", "/hello", "X-Forwarded-For", "198.51.100.1"), http.StatusOK)
	s.blocked(s.do(srv, "GET", "/hello", "X-Forwarded-For", "198.51.100.2"), 60, "per_ip")
	if ip := s.lastIdentifier()[identifiers.IP]; ip != "127.0.0.1" {
		s.t.Errorf("ip = %v, want the socket peer 127.0.0.1", ip)
	}
	// The loopback proxy trusted: its header names the client.
	srv = s.serve(Setup{
		Limiters:       []*ratelimit.Limiter{s.limiter("trusted", perIP("per_ip", 1, time.Minute))},
		TrustedProxies: identifiers.MustParseTrustedProxies("127.0.0.0/8", "::1"),
	})
	s.status(s.do(srv, "GET", "/hello", "X-Forwarded-For", "6.6.6.6, 198.51.100.1"), http.StatusOK)
	if ip := s.lastIdentifier()[identifiers.IP]; ip != "198.51.100.1" {
		s.t.Errorf("ip = %v, want 198.51.100.1 from the trusted proxy's header", ip)
	}
	s.status(s.do(srv, "GET", "/hello", "X-Forwarded-For", "198.51.100.2"), http.StatusOK)
	s.blocked(s.do(srv, "GET", "/hello", "X-Forwarded-For", "198.51.100.1"), 60, "per_ip")
}

// testForwardedUntrusted: the first request that carries a forwarding
// header from a peer no trusted proxy covers is logged, once (slog's
// default logger): behind a proxy nobody listed, every client shares the
// proxy's bucket, which nothing said. A trusted peer's header is no news.
func testForwardedUntrusted(s *suite) {
	var buf testlog.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	s.t.Cleanup(func() { slog.SetDefault(prev) })
	srv := s.serve(Setup{Limiters: []*ratelimit.Limiter{s.limiter("untrusted", perIP("per_ip", 100, time.Minute))}})
	s.status(s.do(srv, "GET", "/hello"), http.StatusOK)
	if got := buf.String(); got != "" {
		s.t.Errorf("a request without forwarding headers logged %q", got)
	}
	for range 3 {
		s.status(s.do(srv, "GET", "/hello", "X-Forwarded-For", "198.51.100.1"), http.StatusOK)
	}
	if got := buf.String(); strings.Count(got, "level=WARN") != 1 || !strings.Contains(got, "header=X-Forwarded-For") ||
		!strings.Contains(got, "peer=127.0.0.1") || !strings.Contains(got, "WithTrustedProxies") {
		s.t.Errorf("three forwarded requests from an untrusted peer logged %q, want one warning naming the header, the peer and the option", got)
	}

	buf.Reset()
	srv = s.serve(Setup{
		Limiters:       []*ratelimit.Limiter{s.limiter("trusted", perIP("per_ip", 100, time.Minute))},
		TrustedProxies: identifiers.MustParseTrustedProxies("127.0.0.0/8", "::1"),
	})
	s.status(s.do(srv, "GET", "/hello", "X-Forwarded-For", "198.51.100.1"), http.StatusOK)
	if got := buf.String(); got != "" {
		s.t.Errorf("a trusted proxy's forwarded request logged %q", got)
	}
}

// testIPv6Prefix: an IPv6 client is keyed by its /64 network, so the
// addresses of one network share a counter (a client holding a /64 is one
// client, not 2^64); WithIPv6Prefix sets another length, ip_full keeps the
// whole address, and an IPv4-mapped address stays IPv4.
func testIPv6Prefix(s *suite) {
	tp := identifiers.MustParseTrustedProxies("127.0.0.0/8", "::1")
	from := func(srv *httptest.Server, addr string) response {
		return s.do(srv, "GET", "/hello", "X-Forwarded-For", addr)
	}
	wantIP := func(ip, full string) {
		s.t.Helper()
		id := s.lastIdentifier()
		if id[identifiers.IP] != ip || id[identifiers.IPFull] != full {
			s.t.Errorf("ip, ip_full = %v, %v; want %s, %s", id[identifiers.IP], id[identifiers.IPFull], ip, full)
		}
	}
	srv := s.serve(Setup{Limiters: []*ratelimit.Limiter{s.limiter("per_64", perIP("per_ip", 2, time.Minute))}, TrustedProxies: tp})
	s.status(from(srv, "2001:db8::1"), http.StatusOK)
	wantIP("2001:db8::/64", "2001:db8::1")
	s.status(from(srv, "2001:db8::2"), http.StatusOK)
	s.blocked(from(srv, "2001:db8::3"), 60, "per_ip")
	s.status(from(srv, "2001:db8:0:1::1"), http.StatusOK) // another /64
	s.status(from(srv, "::ffff:198.51.100.7"), http.StatusOK)
	wantIP("198.51.100.7", "198.51.100.7")

	srv = s.serve(Setup{Limiters: []*ratelimit.Limiter{s.limiter("per_56", perIP("per_ip", 1, time.Minute))}, TrustedProxies: tp, IPv6Prefix: 56})
	s.status(from(srv, "2001:db8:0:1::1"), http.StatusOK)
	wantIP("2001:db8::/56", "2001:db8:0:1::1")
	s.blocked(from(srv, "2001:db8:0:2::1"), 60, "per_ip")   // the same /56
	s.status(from(srv, "2001:db8:0:100::1"), http.StatusOK) // another /56
}

func testEndpoint(s *suite) {
	srv := s.serve(Setup{Limiters: []*ratelimit.Limiter{s.limiter("http", perIP("per_ip", 100, time.Minute))}})
	s.allowed(s.do(srv, "GET", "/items/42"), "item")
	want := ratelimit.Identifier{
		identifiers.IP: "127.0.0.1", identifiers.IPFull: "127.0.0.1", identifiers.Method: "GET", identifiers.Path: "/items/42",
		identifiers.Endpoint: s.a.Endpoint("GET", "/items/{id}"), identifiers.User: identifiers.Anonymous,
	}
	if id := s.lastIdentifier(); !reflect.DeepEqual(id, want) {
		s.t.Errorf("identifier = %v\nwant         %v", id, want)
	}
	r := s.do(srv, "GET", "/no/such/route")
	s.status(r, http.StatusNotFound)
	if got := s.lastIdentifier()[identifiers.Endpoint]; got != identifiers.Unmatched {
		s.t.Errorf("unmatched route: endpoint = %v, want %s", got, identifiers.Unmatched)
	}
}

func testCostHook(s *suite) {
	db := ratelimit.Rule{Name: "db_seconds_per_ip", Characteristics: []string{identifiers.IP},
		Limit: 1, Period: time.Minute}
	dbLimiter := s.limiter("db_utilization", db)
	srv := s.serve(Setup{
		Limiters: []*ratelimit.Limiter{s.limiter("http", perIP("per_ip", 100, time.Minute))},
		Deferred: []adapter.Deferred[guard.Outcome]{guard.Metered[guard.Outcome](dbLimiter, "db_duration_s")},
	})
	count := func() float64 { return s.count(dbLimiter) }
	r := s.do(srv, "GET", "/work?cost=0.7")
	s.allowed(r, "worked")
	s.ietf(r, "per_ip", 100, 60, 99) // a resource budget in seconds does not replace the request headers
	if c := count(); c < 0.69 || c > 0.71 {
		s.t.Fatalf("db seconds counted after the handler = %v, want 0.7", c)
	}
	s.allowed(s.do(srv, "GET", "/work?cost=0.7"), "worked") // 0.7 is not over 1: allowed, then charged
	if c := count(); c < 1.39 || c > 1.41 {
		s.t.Fatalf("db seconds = %v, want 1.4", c)
	}
	r = s.do(srv, "GET", "/work?cost=0.7")
	s.blocked(r, 60, "db_seconds_per_ip")
	if n := s.calls["/work"].Load(); n != 2 {
		s.t.Errorf("handler ran %d times, want 2: an over-budget caller must be blocked before it runs", n)
	}
	if c := count(); c < 1.39 || c > 1.41 {
		s.t.Errorf("db seconds = %v after a blocked request, want 1.4", c)
	}
	s.blocked(s.do(srv, "GET", "/work?cost=0"), 60, "db_seconds_per_ip") // still over budget, whatever it would cost
	if n := s.calls["/work"].Load(); n != 2 {
		s.t.Errorf("handler ran %d times, want 2", n)
	}
}

func testOutcomeHook(s *suite) {
	fails := ratelimit.Rule{Name: "failed_logins", Characteristics: []string{identifiers.IP},
		Limit: 2, Period: time.Minute}
	failLimiter := s.limiter("failed_auth", fails)
	srv := s.serve(Setup{Deferred: []adapter.Deferred[guard.Outcome]{guard.CountStatus(failLimiter, http.StatusUnauthorized)}})
	for i := 0; i < 3; i++ { // successes are not counted
		s.allowed(s.do(srv, "POST", "/login", "X-Password", "right"), "welcome")
	}
	s.status(s.do(srv, "POST", "/login", "X-Password", "wrong"), http.StatusUnauthorized)
	s.status(s.do(srv, "POST", "/login", "X-Password", "wrong"), http.StatusUnauthorized)
	r := s.do(srv, "POST", "/login", "X-Password", "right")
	s.blocked(r, 60, "failed_logins") // two failures used the budget: blocked before the handler
	if n := s.calls["/login"].Load(); n != 5 {
		s.t.Errorf("login handler ran %d times, want 5", n)
	}
	if c := s.count(failLimiter); c != 2 {
		s.t.Errorf("failed logins counted = %v, want 2", c)
	}
}

// testCostHookPanic: a handler that panics after doing work (a reverse proxy
// panics with http.ErrAbortHandler when its client hangs up) is charged what
// it metered, and counts as a 500; the server aborts the response.
func testCostHookPanic(s *suite) {
	dbLimiter := s.limiter("db_utilization", perIP("db_seconds_per_ip", 10, time.Minute))
	errLimiter := s.limiter("server_errors", perIP("errors_per_ip", 10, time.Minute))
	srv := s.serve(Setup{Deferred: []adapter.Deferred[guard.Outcome]{
		guard.Metered[guard.Outcome](dbLimiter, "db_duration_s"),
		guard.CountStatus(errLimiter, http.StatusInternalServerError),
	}})
	resp, err := srv.Client().Get(srv.URL + "/work?cost=0.7&abort=1")
	if err == nil {
		_ = resp.Body.Close()
		s.t.Fatalf("the aborted handler answered %d: this test would prove nothing", resp.StatusCode)
	}
	if n := s.calls["/work"].Load(); n != 1 {
		s.t.Fatalf("handler ran %d times, want 1", n)
	}
	// The charge is made as the panic leaves the middleware, before the server
	// closes the connection: it is there once the client sees the abort.
	if c := s.count(dbLimiter); c < 0.69 || c > 0.71 {
		s.t.Errorf("db seconds counted after the handler panicked = %v, want 0.7", c)
	}
	if c := s.count(errLimiter); c != 1 {
		s.t.Errorf("500s counted after the handler panicked = %v, want 1", c)
	}
}

func testDenyHandler(s *suite) {
	srv := s.serve(Setup{
		Limiters: []*ratelimit.Limiter{s.limiter("http", perIP("per_ip", 1, time.Minute))},
		Deny: func(w http.ResponseWriter, d *ratelimitheaders.Decision) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("slow down: " + d.ViolatedPolicies()[0]))
		},
	})
	s.status(s.do(srv, "GET", "/hello"), http.StatusOK)
	r := s.do(srv, "GET", "/hello")
	s.status(r, http.StatusServiceUnavailable)
	if r.body != "slow down: per_ip" {
		s.t.Errorf("body = %q", r.body)
	}
	s.intHeader(r, "Retry-After", 1, 60) // set before the deny handler runs
	s.header(r, "Cache-Control", "no-store")
	s.ietf(r, "per_ip", 1, 60, 0)

	// A deny handler that answers nothing would send an empty 200 for a
	// blocked request: the default 429 follows it.
	srv = s.serve(Setup{
		Limiters: []*ratelimit.Limiter{s.limiter("http", perIP("per_ip", 1, time.Minute))},
		Deny:     func(w http.ResponseWriter, _ *ratelimitheaders.Decision) { w.Header().Set("X-Denied", "yes") },
	})
	s.status(s.do(srv, "GET", "/hello"), http.StatusOK)
	r = s.do(srv, "GET", "/hello")
	s.status(r, http.StatusTooManyRequests)
	s.header(r, "Content-Type", ratelimitheaders.ContentTypeProblem)
	s.header(r, "X-Denied", "yes")
}

// testRetryAfterJitter: with jitter, each blocked response's Retry-After lies
// between the real reset (the RateLimit t= of the same response) and the
// reset plus the jitter, and the values differ between responses.
func testRetryAfterJitter(s *suite) {
	const jitter = 30
	srv := s.serve(Setup{RetryAfterJitter: jitter * time.Second,
		Limiters: []*ratelimit.Limiter{s.limiter("http", perIP("per_ip", 1, time.Minute))}})
	s.status(s.do(srv, "GET", "/hello"), http.StatusOK)
	seen := map[int64]bool{}
	for range 40 {
		r := s.do(srv, "GET", "/hello")
		s.status(r, http.StatusTooManyRequests)
		reset := s.ietf(r, "per_ip", 1, 60, 0)
		ra := s.intHeader(r, ratelimitheaders.HeaderRetryAfter, reset, reset+jitter)
		seen[ra-reset] = true
	}
	if len(seen) < 2 { // 40 draws from 31 values all equal: about 1 in 31^39
		s.t.Errorf("Retry-After carried no jitter: extra delays %v", seen)
	}
}

// testFailOpen stops a private Redis: requests pass, without rate-limit
// headers. (How long a failing check may wait is the limiter's Timeout,
// which core's fault tests cover; no test here measures elapsed time.)
func testFailOpen(s *suite) {
	rs := redistest.StartServer(s.t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	s.t.Cleanup(func() { _ = client.Close() })
	down := s.limiterOn(redisstore.New(client), redistest.Prefix(s.t), "on_redis", perIP("redis_rule", 5, time.Minute))
	srv := s.serve(Setup{Limiters: []*ratelimit.Limiter{down}})
	s.ietf(s.do(srv, "GET", "/hello"), "redis_rule", 5, 60, 4) // Redis is up
	// A deferred limiter on the same Redis, over its budget while Redis is up.
	overBudget := s.limiterOn(redisstore.New(client), redistest.Prefix(s.t), "deferred_on_redis", perIP("budget", 1, time.Minute))
	if res := overBudget.Check(context.Background(), ratelimit.Identifier{identifiers.IP: "127.0.0.1"}, ratelimit.Cost(5)); !res.Blocked() {
		s.t.Fatalf("budget charged 5 of 1 is not blocked: %+v", res)
	}
	rs.Stop()
	for i := 0; i < 8; i++ { // past the breaker threshold too
		r := s.do(srv, "GET", "/hello")
		s.allowed(r, "hello")
		s.noHeader(r, rateLimitHeaders...)
	}
	// Beside a healthy limiter, only the healthy one's headers appear: the
	// failed limiter says nothing, and the healthy one is not silenced.
	healthy := s.limiterOn(ratelimit.NewMemoryStore(), "", "healthy", perIP("memory_rule", 50, time.Minute))
	srv = s.serve(Setup{Limiters: []*ratelimit.Limiter{down, healthy}})
	r := s.do(srv, "GET", "/hello")
	s.allowed(r, "hello")
	s.ietf(r, "memory_rule", 50, 60, 49)
	// Failed limiters never block, whatever they counted while their store was
	// up (the over-budget deferred one is peeked and fails); a healthy limiter
	// after them still does, and the 429 names only the healthy rule.
	tight := s.limiterOn(ratelimit.NewMemoryStore(), "", "tight", perIP("tight_rule", 1, time.Minute))
	srv = s.serve(Setup{
		Limiters: []*ratelimit.Limiter{down, tight},
		Deferred: []adapter.Deferred[guard.Outcome]{guard.CountStatus(overBudget, http.StatusOK)},
	})
	r = s.do(srv, "GET", "/hello")
	s.allowed(r, "hello")
	s.ietf(r, "tight_rule", 1, 60, 0)
	r = s.do(srv, "GET", "/hello")
	s.blocked(r, 60, "tight_rule")
	s.ietf(r, "tight_rule", 1, 60, 0)
}

// testCallerGone: a request whose caller went away during its checks (its
// context ended, so the check fails open with ratelimit.ErrCanceled: the
// memory store and a Redis client both see it before counting) was not
// counted, and its handler must not run: a client over its limit would
// otherwise have the handler run, uncounted, by hanging up during the check.
// It is answered 499 (client closed request). The handler is served
// directly, since no client can end the context a real server gives it at a
// chosen moment.
func testCallerGone(s *suite) {
	for _, tc := range []struct {
		name  string
		setup Setup
	}{
		{"limiter", Setup{Limiters: []*ratelimit.Limiter{s.limiter("http", perIP("per_ip", 1, time.Minute))}}},
		{"deferred limiter", Setup{Deferred: []adapter.Deferred[guard.Outcome]{
			guard.Metered[guard.Outcome](s.limiter("db_utilization", perIP("db_seconds_per_ip", 1, time.Minute)), "db_duration_s")}}},
	} {
		tc.setup.Routes = s.routes()
		h := s.a.New(s.t, tc.setup)
		serve := func(ctx context.Context) int {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/work?cost=2", nil).WithContext(ctx))
			return w.Code
		}
		ran := s.calls["/work"].Load()
		if st := serve(context.Background()); st != http.StatusOK { // spends the limit, or the budget
			s.t.Fatalf("%s: first request answered %d, want 200", tc.name, st)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		st := serve(ctx)
		if n := s.calls["/work"].Load() - ran; n != 1 {
			s.t.Errorf("%s: the handler ran %d times, want 1: not for the request whose caller went away", tc.name, n)
		}
		if st != guard.StatusClientClosedRequest {
			s.t.Errorf("%s: the request whose caller went away was answered %d, want 499", tc.name, st)
		}
	}
}
