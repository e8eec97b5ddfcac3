package ratelimitecho_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/adaptertest"
	ratelimitecho "github.com/ratekit/ratekit/middleware/echo"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// TestAdapter runs the shared HTTP adapter suite on a real Echo server.
func TestAdapter(t *testing.T) {
	adaptertest.Run(t, adaptertest.Adapter{
		New: newEcho,
		Endpoint: func(method, pattern string) string {
			return method + " " + strings.ReplaceAll(strings.ReplaceAll(pattern, "{", ":"), "}", "")
		},
		Package: "ratelimitecho",
	})
}

func newEcho(t *testing.T, s adaptertest.Setup) http.Handler {
	e := echo.New()
	opts := []ratelimitecho.Option{
		ratelimitecho.WithLimiters(s.Limiters...),
		ratelimitecho.WithDeferred(s.Deferred...),
		ratelimitecho.WithProfile(s.Profile),
		ratelimitecho.WithRetryAfterJitter(s.RetryAfterJitter),
		ratelimitecho.WithTrustedProxies(s.TrustedProxies),
	}
	if s.IPv6Prefix != 0 {
		opts = append(opts, ratelimitecho.WithIPv6Prefix(s.IPv6Prefix))
	}
	if s.Skip != nil {
		opts = append(opts, ratelimitecho.WithSkipper(func(c echo.Context) bool { return s.Skip(c.Request()) }))
	}
	if s.Identifier != nil {
		opts = append(opts, ratelimitecho.WithIdentifier(func(c echo.Context) ratelimit.Identifier { return s.Identifier(c.Request()) }))
	}
	if s.Properties != nil {
		opts = append(opts, ratelimitecho.WithProperties(func(c echo.Context, id ratelimit.Identifier) { s.Properties(c.Request(), id) }))
	}
	if s.Cost != nil {
		opts = append(opts, ratelimitecho.WithCost(func(c echo.Context) float64 { return s.Cost(c.Request()) }))
	}
	if s.Now != nil {
		opts = append(opts, ratelimitecho.WithClock(s.Now))
	}
	if s.Deny != nil {
		opts = append(opts, ratelimitecho.WithDenyHandler(func(c echo.Context, d *ratelimitheaders.Decision) error {
			s.Deny(c.Response(), d)
			return nil
		}))
	}
	e.Use(ratelimitecho.Middleware(nil, opts...))
	for _, r := range s.Routes {
		path := strings.ReplaceAll(strings.ReplaceAll(r.Pattern, "{", ":"), "}", "")
		e.Add(r.Method, path, echo.WrapHandler(r.Handler))
	}
	return e
}

func newLimiter(t *testing.T, name string, limit int64, observe func(ratelimit.Identifier)) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{
		Name: name, Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "r", Characteristics: []string{identifiers.IP},
			Limit: limit, Period: time.Minute}},
		Observer: func(_ context.Context, e ratelimit.Event) {
			if observe != nil {
				observe(e.Identifier)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func get(t *testing.T, srv *httptest.Server, method, path string, header ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestOutcomeFromReturnedError: a handler that returns an *echo.HTTPError
// instead of writing is counted with the status Echo's error handler sends.
func TestOutcomeFromReturnedError(t *testing.T) {
	failed := newLimiter(t, "failed", 1, nil)
	e := echo.New()
	e.Use(ratelimitecho.Middleware(nil, ratelimitecho.WithDeferred(ratelimitecho.CountStatus(failed, http.StatusUnauthorized))))
	e.POST("/login", func(c echo.Context) error { return echo.NewHTTPError(http.StatusUnauthorized, "bad password") })
	srv := httptest.NewServer(e)
	defer srv.Close()
	for i, want := range []int{401, 429} {
		if got := get(t, srv, "POST", "/login").StatusCode; got != want {
			t.Errorf("attempt %d: status %d, want %d", i+1, got, want)
		}
	}
}

// TestOutcomeIsTheStatusSent: the status an outcome hook sees for a returned
// error is the one Echo's default error handler sends, which takes an
// *echo.HTTPError only as returned (not wrapped), and its Internal's code when
// that is an *echo.HTTPError too.
func TestOutcomeIsTheStatusSent(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"http error", echo.NewHTTPError(http.StatusUnauthorized, "bad password")},
		{"wrapped http error", fmt.Errorf("login: %w", echo.NewHTTPError(http.StatusUnauthorized, "bad password"))},
		{"http error with an internal one", echo.NewHTTPError(http.StatusBadRequest).SetInternal(echo.NewHTTPError(http.StatusConflict))},
		{"http error with another internal error", echo.NewHTTPError(http.StatusBadRequest).SetInternal(errors.New("parse"))},
		{"other error", errors.New("boom")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			seen := 0
			record := ratelimitecho.Deferred{Limiter: newLimiter(t, "outcomes", 100, nil),
				Charge: func(_ context.Context, o ratelimitecho.Outcome) (float64, bool) {
					mu.Lock()
					defer mu.Unlock()
					seen = o.Status
					return 0, false
				}}
			e := echo.New()
			e.Use(ratelimitecho.Middleware(nil, ratelimitecho.WithDeferred(record)))
			e.GET("/", func(echo.Context) error { return tt.err })
			srv := httptest.NewServer(e)
			defer srv.Close()
			sent := get(t, srv, "GET", "/").StatusCode
			mu.Lock()
			defer mu.Unlock()
			if seen != sent {
				t.Errorf("the outcome hook saw status %d, Echo sent %d", seen, sent)
			}
		})
	}
}

// TestUnmatchedRoutes: 404 and 405 get the Unmatched endpoint, although Echo
// reports the path of the node it stopped at.
func TestUnmatchedRoutes(t *testing.T) {
	var last ratelimit.Identifier
	l := newLimiter(t, "http", 100, func(id ratelimit.Identifier) { last = id })
	e := echo.New()
	e.Use(ratelimitecho.Middleware(l))
	e.GET("/users/:id", func(c echo.Context) error { return c.String(200, "user") })
	checkEndpoints(t, e, &last, []endpointCase{
		{"GET", "/users/7", 200, "GET /users/:id"},
		{"DELETE", "/users/7", 405, identifiers.Unmatched},
		{"OPTIONS", "/users/7", 204, identifiers.Unmatched},
		{"GET", "/nothing/here", 404, identifiers.Unmatched},
		{"GET", "/users", 404, identifiers.Unmatched},
	})
}

// endpointCase is a request and the status and endpoint it must get.
type endpointCase struct {
	method, path string
	status       int
	endpoint     string
}

// checkEndpoints sends each case's request to e and checks its status and
// the endpoint of the identifier the limiter last saw (*last).
func checkEndpoints(t *testing.T, e *echo.Echo, last *ratelimit.Identifier, cases []endpointCase) {
	t.Helper()
	srv := httptest.NewServer(e)
	defer srv.Close()
	for _, tc := range cases {
		resp := get(t, srv, tc.method, tc.path)
		if resp.StatusCode != tc.status || (*last)[identifiers.Endpoint] != tc.endpoint {
			t.Errorf("%s %s: status %d endpoint %v, want %d %s", tc.method, tc.path, resp.StatusCode, (*last)[identifiers.Endpoint], tc.status, tc.endpoint)
		}
	}
}

// TestUnmatchedRoutesOnAGroup: on a group, Echo routes the requests that
// match none of its routes to the catch-all 404 routes Group.Use registers
// ("/api" and "/api/*"), as it does those an e.RouteNotFound route takes:
// they get the Unmatched endpoint, not that route's path, which a real route
// may have too.
func TestUnmatchedRoutesOnAGroup(t *testing.T) {
	var last ratelimit.Identifier
	l := newLimiter(t, "http", 100, func(id ratelimit.Identifier) { last = id })
	e := echo.New()
	g := e.Group("/api")
	g.Use(ratelimitecho.Middleware(l))
	g.GET("/users/:id", func(c echo.Context) error { return c.String(200, "user") })
	g.GET("/files/*", func(c echo.Context) error { return c.String(200, "file") })
	g.RouteNotFound("/files/*", func(c echo.Context) error { return c.NoContent(404) })
	checkEndpoints(t, e, &last, []endpointCase{
		{"GET", "/api/users/7", 200, "GET /api/users/:id"},
		{"GET", "/api/files/a.txt", 200, "GET /api/files/*"},
		{"GET", "/api/nothing", 404, identifiers.Unmatched},
		{"GET", "/api", 404, identifiers.Unmatched},
		{"DELETE", "/api/users/7", 404, identifiers.Unmatched},
		{"POST", "/api/files/a.txt", 404, identifiers.Unmatched},
	})
}

// TestEchoIPExtractor: RealIP is used only when asked for, and then follows
// e.IPExtractor; an Echo without one, or with one that believes an arbitrary
// peer's forwarding headers, is refused at start-up: the option would be
// ignored, or any client would pick its own bucket.
func TestEchoIPExtractor(t *testing.T) {
	trustAnyone := func(r *http.Request) string { return r.Header.Get(echo.HeaderXRealIP) }
	for _, tc := range []struct {
		name      string
		extract   echo.IPExtractor
		realIP    bool // WithEchoIPExtractor
		nilEcho   bool // WithEchoIPExtractor(nil)
		wantIP    string
		wantPanic string
	}{
		{name: "default ignores RealIP's blind XFF trust", wantIP: "127.0.0.1"},
		{name: "default ignores e.IPExtractor", extract: echo.ExtractIPFromXFFHeader(echo.TrustLoopback(true)), wantIP: "127.0.0.1"},
		{name: "loopback trusted by the extractor", extract: echo.ExtractIPFromXFFHeader(echo.TrustLoopback(true)), realIP: true, wantIP: "198.51.100.1"},
		{name: "X-Real-IP from loopback", extract: echo.ExtractIPFromRealIPHeader(echo.TrustLoopback(true)), realIP: true, wantIP: "198.51.100.1"},
		{name: "ExtractIPDirect", extract: echo.ExtractIPDirect(), realIP: true, wantIP: "127.0.0.1"},
		// Without e.IPExtractor, RealIP believes anyone's X-Forwarded-For.
		{name: "no extractor: refused", realIP: true, wantPanic: "e.IPExtractor is nil"},
		{name: "nil Echo: refused", realIP: true, nilEcho: true, wantPanic: "the Echo is nil"},
		{name: "every IPv4 peer trusted: refused", extract: echo.ExtractIPFromXFFHeader(echo.TrustIPRange(cidr(t, "0.0.0.0/0"))),
			realIP: true, wantPanic: "from 192.0.2.1"},
		{name: "every IPv6 peer trusted: refused", extract: echo.ExtractIPFromXFFHeader(echo.TrustIPRange(cidr(t, "::/0"))),
			realIP: true, wantPanic: "from 2001:db8::1"},
		{name: "X-Real-IP from anyone: refused", extract: trustAnyone, realIP: true, wantPanic: "X-Real-Ip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var last ratelimit.Identifier
			e := echo.New()
			e.IPExtractor = tc.extract
			var opts []ratelimitecho.Option
			switch {
			case tc.nilEcho:
				opts = append(opts, ratelimitecho.WithEchoIPExtractor(nil))
			case tc.realIP:
				opts = append(opts, ratelimitecho.WithEchoIPExtractor(e))
			}
			l := newLimiter(t, "http", 100, func(id ratelimit.Identifier) { last = id })
			if tc.wantPanic != "" {
				checkPanics(t, tc.wantPanic, func() { ratelimitecho.Middleware(l, opts...) })
				return
			}
			e.Use(ratelimitecho.Middleware(l, opts...))
			e.GET("/", func(c echo.Context) error { return c.NoContent(204) })
			srv := httptest.NewServer(e)
			defer srv.Close()
			get(t, srv, "GET", "/", "X-Forwarded-For", "198.51.100.1", "X-Real-IP", "198.51.100.1")
			if last[identifiers.IP] != tc.wantIP {
				t.Errorf("ip = %v, want %s", last[identifiers.IP], tc.wantIP)
			}
		})
	}
}

// TestEchoIPExtractorRemoved: an IPExtractor removed after Middleware was
// built is not a licence for RealIP's blind trust: the ip is then the socket
// peer.
func TestEchoIPExtractorRemoved(t *testing.T) {
	var last ratelimit.Identifier
	e := echo.New()
	e.IPExtractor = echo.ExtractIPDirect()
	e.Use(ratelimitecho.Middleware(newLimiter(t, "http", 100, func(id ratelimit.Identifier) { last = id }),
		ratelimitecho.WithEchoIPExtractor(e)))
	e.GET("/", func(c echo.Context) error { return c.NoContent(204) })
	e.IPExtractor = nil
	srv := httptest.NewServer(e)
	defer srv.Close()
	get(t, srv, "GET", "/", "X-Forwarded-For", "198.51.100.1")
	if last[identifiers.IP] != "127.0.0.1" {
		t.Errorf("ip = %v, want the socket peer 127.0.0.1", last[identifiers.IP])
	}
}

func cidr(t *testing.T, s string) *net.IPNet {
	t.Helper()
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkPanics fails t unless f panics with a message from
// WithEchoIPExtractor holding want.
func checkPanics(t *testing.T, want string, f func()) {
	t.Helper()
	msg := func() (msg any) {
		defer func() { msg = recover() }()
		f()
		return nil
	}()
	if s := fmt.Sprint(msg); !strings.HasPrefix(s, "ratelimitecho: WithEchoIPExtractor: ") || !strings.Contains(s, want) {
		t.Errorf("panic %q, want one from ratelimitecho's WithEchoIPExtractor naming %q", s, want)
	}
}

// TestDenyThroughHTTPErrorHandler: a blocked request's error reaches the
// application's e.HTTPErrorHandler as an *echo.HTTPError (429, the problem
// details as Message) wrapping a *DeniedError with the decision, and the
// response already carries the rate-limit headers and nosniff.
func TestDenyThroughHTTPErrorHandler(t *testing.T) {
	e := echo.New()
	var got []error
	var mu sync.Mutex
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		mu.Lock()
		got = append(got, err)
		mu.Unlock()
		d, ok := ratelimitecho.Decision(err)
		if !ok {
			_ = c.String(http.StatusInternalServerError, "not a rate limit")
			return
		}
		_ = c.String(http.StatusTooManyRequests, "custom: "+strings.Join(d.ViolatedPolicies(), ","))
	}
	e.Use(ratelimitecho.Middleware(newLimiter(t, "api", 1, nil)))
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })
	srv := httptest.NewServer(e)
	defer srv.Close()

	if r := get(t, srv, "GET", "/hello"); r.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d", r.StatusCode)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/hello", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || string(body) != "custom: r" {
		t.Fatalf("blocked: %d %q, want the custom handler's 429", resp.StatusCode, body)
	}
	for _, h := range []string{"Retry-After", "RateLimit", "RateLimit-Policy"} {
		if resp.Header.Get(h) == "" {
			t.Errorf("header %s missing", h)
		}
	}
	if v := resp.Header.Get("X-Content-Type-Options"); v != "nosniff" {
		t.Errorf("X-Content-Type-Options = %q", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("HTTPErrorHandler saw %d errors, want 1", len(got))
	}
	var he *echo.HTTPError
	if !errors.As(got[0], &he) || he.Code != http.StatusTooManyRequests {
		t.Fatalf("error %T %v is not a 429 *echo.HTTPError", got[0], got[0])
	}
	var de *ratelimitecho.DeniedError
	if !errors.As(got[0], &de) || de.Error() != "ratelimitecho: rate limit exceeded: r" || de.Problem.Status != 429 || de.Problem.ViolatedPolicies[0] != "r" {
		t.Fatalf("no *DeniedError with the problem in %v", got[0])
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=UTF-8" {
		t.Fatalf("Content-Type = %q: the custom handler's text was labelled otherwise", ct)
	}
	if _, ok := ratelimitecho.Decision(errors.New("other")); ok {
		t.Fatal("Decision of an unrelated error")
	}
}

// The path property is the path Echo routes on: a request for /%68ealthz,
// which Echo serves from a catch-all route, is not the health check that a
// skip rule on path /healthz exempts (decoded, it read as /healthz and was
// never counted).
func TestPathIsTheRoutedPath(t *testing.T) {
	l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{
		{Name: "skip_health_checks", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{identifiers.Path: ratelimit.Equal("/healthz")}},
		{Name: "per_ip", Characteristics: []string{identifiers.IP}, Limit: 1, Period: time.Minute},
	}})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.Use(ratelimitecho.Middleware(l))
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	e.GET("/*", func(c echo.Context) error { return c.String(http.StatusOK, "catch-all "+c.Request().URL.Path) })
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	for i := range 3 { // the health check is exempt
		if resp := get(t, srv, http.MethodGet, "/healthz"); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /healthz #%d: %d", i+1, resp.StatusCode)
		}
	}
	if resp := get(t, srv, http.MethodGet, "/%68ealthz"); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /%%68ealthz #1: %d, want 200", resp.StatusCode)
	}
	if resp := get(t, srv, http.MethodGet, "/%68ealthz"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("GET /%%68ealthz #2: %d, want 429 (per_ip counts it: Echo served it from the catch-all)", resp.StatusCode)
	}
}

// TestDenyHEAD: Echo's default error handler answers a blocked HEAD without a body.
func TestDenyHEAD(t *testing.T) {
	e := echo.New()
	e.Use(ratelimitecho.Middleware(newLimiter(t, "api", 1, nil)))
	e.HEAD("/hello", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	srv := httptest.NewServer(e)
	defer srv.Close()
	get(t, srv, "HEAD", "/hello")
	r := get(t, srv, "HEAD", "/hello")
	if r.StatusCode != http.StatusTooManyRequests || r.ContentLength > 0 || r.Header.Get("Retry-After") == "" {
		t.Fatalf("HEAD blocked: %d, length %d, headers %v", r.StatusCode, r.ContentLength, r.Header)
	}
}
