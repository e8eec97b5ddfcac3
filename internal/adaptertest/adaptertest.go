// Package adaptertest is the end-to-end suite every HTTP rate-limit adapter
// (ratelimithttp, ratelimitecho, ratelimitgin) runs: the adapter serves a
// fixed set of routes on a real server (httptest.NewServer), and the suite
// drives it with a real client, against the in-memory store and a real Redis,
// checking statuses, every header of each profile, the problem+json body,
// shadow rules, fail-open, several limiters, skipping, custom identifiers and
// extra properties, trusted proxies, route templates, request costs, the
// clock, the cost and outcome hooks, the panic a nil limiter raises at
// start-up, the charge of a handler that panics, and a request whose caller
// went away during the checks. Every option the HTTP adapters share (
// WithLimiters, WithDeferred, WithClock, WithTrustedProxies, WithProfile,
// WithRetryAfterJitter) is a field of Setup, so each adapter's namesake is
// tested through it.
package adaptertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/guard"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Route is one route the adapter must serve. Pattern uses ServeMux syntax
// ("/items/{id}"); adapters translate parameters to their own syntax.
type Route struct {
	Method  string
	Pattern string
	Handler http.HandlerFunc
}

// Setup is what one test asks of the adapter, in framework-neutral terms. The
// adapter maps every non-nil hook to its own option (its skipper, identifier
// function, deny handler), so that the suite tests those options.
type Setup struct {
	Limiters       []*ratelimit.Limiter
	Deferred       []adapter.Deferred[guard.Outcome]
	Profile        ratelimitheaders.Profile
	TrustedProxies identifiers.TrustedProxies
	// IPv6Prefix, when not 0, maps to the adapter's WithIPv6Prefix.
	IPv6Prefix int
	// Skip, when set, exempts the requests it returns true for.
	Skip func(r *http.Request) bool
	// Identifier, when set, replaces the adapter's identifier builder.
	Identifier func(r *http.Request) ratelimit.Identifier
	// Properties, when set, adds properties to the identifier, whichever
	// builder made it (the adapter's default or Identifier).
	Properties func(r *http.Request, id ratelimit.Identifier)
	// Cost, when set, is the cost each request charges the Limiters.
	Cost func(r *http.Request) float64
	// Now, when set, is the adapter's clock (its WithClock option).
	Now func() time.Time
	// Deny, when set, answers blocked requests instead of the default 429.
	Deny func(w http.ResponseWriter, d *ratelimitheaders.Decision)
	// RetryAfterJitter maps to the adapter's WithRetryAfterJitter.
	RetryAfterJitter time.Duration
	// Routes to register, on a router the adapter's middleware wraps.
	Routes []Route
}

// Adapter is the adapter under test.
type Adapter struct {
	// New returns the handler of a server set up as s.
	New func(t *testing.T, s Setup) http.Handler
	// Endpoint returns the endpoint property the adapter reports for a
	// request to the route (method, ServeMux-style pattern).
	Endpoint func(method, pattern string) string
	// Package is the adapter's package name, which begins the message of
	// the panic its Middleware raises on a programming error ("ratelimitgin:
	// limiter 0 is nil"). Empty skips that check.
	Package string
}

// env is one store under test.
type env struct {
	store  func(t *testing.T) ratelimit.Store
	prefix func(t *testing.T) string
}

// Run runs the whole suite against the adapter, on the memory store and on
// the Redis of RATEKIT_TEST_REDIS_URL (skipped, saying why, when unset).
func Run(t *testing.T, a Adapter) {
	envs := map[string]env{
		"memory": {
			store:  func(*testing.T) ratelimit.Store { return ratelimit.NewMemoryStore() },
			prefix: func(*testing.T) string { return "" },
		},
		"redis": {
			store:  func(t *testing.T) ratelimit.Store { return redisstore.New(redistest.Client(t)) },
			prefix: func(t *testing.T) string { return redistest.Prefix(t) },
		},
	}
	for _, name := range []string{"memory", "redis"} {
		e := envs[name]
		t.Run(name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					s := &suite{t: t, a: a, env: e, calls: map[string]*atomic.Int64{}}
					tc.run(s)
				})
			}
		})
	}
	t.Run("fail_open", func(t *testing.T) {
		s := &suite{t: t, a: a, calls: map[string]*atomic.Int64{}}
		testFailOpen(s)
	})
	t.Run("nil_limiter_panics", func(t *testing.T) {
		s := &suite{t: t, a: a, calls: map[string]*atomic.Int64{}}
		for name, setup := range map[string]Setup{
			"limiter":          {Limiters: []*ratelimit.Limiter{nil}},
			"deferred limiter": {Deferred: []adapter.Deferred[guard.Outcome]{guard.Metered[guard.Outcome](nil, "db_duration_s")}},
			// Middleware(nil) and no option giving one: it would check
			// nothing, as when the limiter's constructor failed unseen.
			"limiter and no other": {},
		} {
			func() {
				defer func() {
					s.startupPanic("nil "+name, recover())
				}()
				setup.Routes = s.routes()
				a.New(t, setup)
			}()
		}
	})
}

var tests = []struct {
	name string
	run  func(*suite)
}{
	{"allow_and_block", testAllowAndBlock},
	{"profile_legacy", testProfileLegacy},
	{"profile_gitlab", testProfileGitLab},
	{"profile_none", testProfileNone},
	{"shadow_rules", testShadow},
	{"shadow_mode", testShadowMode},
	{"multiple_limiters", testMultipleLimiters},
	{"first_block_ends_checks", testFirstBlockEndsChecks},
	{"skip", testSkip},
	{"custom_identifier", testCustomIdentifier},
	{"properties_hook", testProperties},
	{"properties_with_identifier", testPropertiesWithIdentifier},
	{"request_cost", testRequestCost},
	{"clock", testClock},
	{"trusted_proxies", testTrustedProxies},
	{"ipv6_prefix", testIPv6Prefix},
	{"endpoint_template", testEndpoint},
	{"cost_hook", testCostHook},
	{"outcome_hook", testOutcomeHook},
	{"cost_hook_handler_panics", testCostHookPanic},
	{"deny_handler", testDenyHandler},
	{"forwarded_untrusted", testForwardedUntrusted},
	{"retry_after_jitter", testRetryAfterJitter},
	{"caller_gone", testCallerGone},
}

// suite is the state of one test.
type suite struct {
	t     *testing.T
	a     Adapter
	env   env
	calls map[string]*atomic.Int64 // handler runs per route pattern

	mu  sync.Mutex
	ids []ratelimit.Identifier // identifiers the limiters saw, in order
}

// limiter builds a limiter on the test's store that records identifiers.
func (s *suite) limiter(name string, rules ...ratelimit.Rule) *ratelimit.Limiter {
	return s.limiterOn(s.env.store(s.t), s.env.prefix(s.t), name, rules...)
}

func (s *suite) limiterOn(store ratelimit.Store, prefix, name string, rules ...ratelimit.Rule) *ratelimit.Limiter {
	s.t.Helper()
	l, err := ratelimit.New(ratelimit.Config{
		Name: name, Store: store, KeyPrefix: prefix, Rules: rules,
		Timeout: 250 * time.Millisecond,
		Observer: func(_ context.Context, e ratelimit.Event) {
			if e.Kind == ratelimit.EventCheck {
				s.mu.Lock()
				s.ids = append(s.ids, e.Identifier)
				s.mu.Unlock()
			}
		},
	})
	if err != nil {
		s.t.Fatalf("new limiter %s: %v", name, err)
	}
	return l
}

// count returns what l has counted for the loopback client in its most
// constraining rule (0 when nothing was counted).
func (s *suite) count(l *ratelimit.Limiter) float64 {
	res := l.Peek(context.Background(), ratelimit.Identifier{identifiers.IP: "127.0.0.1"}, ratelimit.Cost(0))
	if res.Info == nil {
		return 0
	}
	return res.Info.Count
}

func (s *suite) lastIdentifier() ratelimit.Identifier {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ids) == 0 {
		s.t.Fatal("no limiter check saw an identifier")
	}
	return s.ids[len(s.ids)-1]
}

func (s *suite) routes() []Route {
	count := func(p string) *atomic.Int64 {
		if s.calls[p] == nil {
			s.calls[p] = &atomic.Int64{}
		}
		return s.calls[p]
	}
	hello, items, login, work, health := count("/hello"), count("/items/{id}"), count("/login"), count("/work"), count("/health")
	return []Route{
		{"GET", "/hello", func(w http.ResponseWriter, r *http.Request) {
			hello.Add(1)
			_, _ = w.Write([]byte("hello"))
		}},
		{"GET", "/items/{id}", func(w http.ResponseWriter, r *http.Request) {
			items.Add(1)
			_, _ = w.Write([]byte("item"))
		}},
		{"POST", "/login", func(w http.ResponseWriter, r *http.Request) {
			login.Add(1)
			if r.Header.Get("X-Password") != "right" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			_, _ = w.Write([]byte("welcome"))
		}},
		{"GET", "/work", func(w http.ResponseWriter, r *http.Request) {
			work.Add(1)
			cost, _ := strconv.ParseFloat(r.URL.Query().Get("cost"), 64)
			// What a database wrapper deep in the handler would do.
			adapter.AddCost(r.Context(), "db_duration_s", cost)
			if r.URL.Query().Has("abort") { // as a reverse proxy whose client hung up
				panic(http.ErrAbortHandler)
			}
			_, _ = w.Write([]byte("worked"))
		}},
		{"GET", "/health", func(w http.ResponseWriter, r *http.Request) {
			health.Add(1)
			_, _ = w.Write([]byte("ok"))
		}},
	}
}

// serve starts a real server for setup s.
func (s *suite) serve(setup Setup) *httptest.Server {
	s.t.Helper()
	setup.Routes = s.routes()
	srv := httptest.NewServer(s.a.New(s.t, setup))
	s.t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status int
	header http.Header
	body   string
	at     time.Time // when the response arrived
}

func (s *suite) do(srv *httptest.Server, method, path string, header ...string) response {
	s.t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b [4096]byte
	n, _ := readFull(resp, b[:])
	return response{status: resp.StatusCode, header: resp.Header, body: string(b[:n]), at: time.Now()}
}

func readFull(resp *http.Response, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := resp.Body.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func perIP(name string, limit int64, period time.Duration) ratelimit.Rule {
	return ratelimit.Rule{
		Name: name, Characteristics: []string{identifiers.IP},
		Limit: limit, Period: period,
	}
}
