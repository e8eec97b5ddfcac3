package ratelimitgin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/adaptertest"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitgin "github.com/ratekit/ratekit/middleware/gin"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

func init() { gin.SetMode(gin.TestMode) }

func ginPath(pattern string) string {
	return strings.ReplaceAll(strings.ReplaceAll(pattern, "{", ":"), "}", "")
}

// TestAdapter runs the shared HTTP adapter suite on a real Gin server.
func TestAdapter(t *testing.T) {
	adaptertest.Run(t, adaptertest.Adapter{
		New:      newGin,
		Endpoint: func(method, pattern string) string { return method + " " + ginPath(pattern) },
		Package:  "ratelimitgin",
	})
}

func newGin(t *testing.T, s adaptertest.Setup) http.Handler {
	r := gin.New()
	opts := []ratelimitgin.Option{
		ratelimitgin.WithLimiters(s.Limiters...),
		ratelimitgin.WithDeferred(s.Deferred...),
		ratelimitgin.WithProfile(s.Profile),
		ratelimitgin.WithRetryAfterJitter(s.RetryAfterJitter),
		ratelimitgin.WithTrustedProxies(s.TrustedProxies),
	}
	if s.IPv6Prefix != 0 {
		opts = append(opts, ratelimitgin.WithIPv6Prefix(s.IPv6Prefix))
	}
	if s.Skip != nil {
		opts = append(opts, ratelimitgin.WithSkip(func(c *gin.Context) bool { return s.Skip(c.Request) }))
	}
	if s.Identifier != nil {
		opts = append(opts, ratelimitgin.WithIdentifier(func(c *gin.Context) ratelimit.Identifier { return s.Identifier(c.Request) }))
	}
	if s.Properties != nil {
		opts = append(opts, ratelimitgin.WithProperties(func(c *gin.Context, id ratelimit.Identifier) { s.Properties(c.Request, id) }))
	}
	if s.Cost != nil {
		opts = append(opts, ratelimitgin.WithCost(func(c *gin.Context) float64 { return s.Cost(c.Request) }))
	}
	if s.Now != nil {
		opts = append(opts, ratelimitgin.WithClock(s.Now))
	}
	if s.Deny != nil {
		opts = append(opts, ratelimitgin.WithDenyHandler(func(c *gin.Context, d *ratelimitheaders.Decision) {
			s.Deny(c.Writer, d)
			c.Abort()
		}))
	}
	r.Use(ratelimitgin.Middleware(nil, opts...))
	for _, rt := range s.Routes {
		r.Handle(rt.Method, ginPath(rt.Pattern), gin.WrapF(rt.Handler))
	}
	return r
}

func newLimiter(t *testing.T, limit int64, observe func(ratelimit.Identifier)) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{
		Name: "http", Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "r", Characteristics: []string{identifiers.IP},
			Limit: limit, Period: time.Minute}},
		Observer: func(_ context.Context, e ratelimit.Event) { observe(e.Identifier) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLaterHandlersDoNotRun: a blocked request stops the chain, including
// middleware registered after the limiter.
func TestLaterHandlersDoNotRun(t *testing.T) {
	ran := 0
	r := gin.New()
	r.Use(ratelimitgin.Middleware(newLimiter(t, 1, func(ratelimit.Identifier) {})))
	r.Use(func(c *gin.Context) { ran++; c.Next() })
	r.GET("/", func(c *gin.Context) { c.String(200, "ok") })
	srv := httptest.NewServer(r)
	defer srv.Close()
	for _, want := range []int{200, 429, 429} {
		resp, err := srv.Client().Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("status %d, want %d", resp.StatusCode, want)
		}
	}
	if ran != 1 {
		t.Errorf("later middleware ran %d times, want 1", ran)
	}
}

// TestMeterFromGinContext: a handler reaches the meter through
// c.Request.Context(), and through c itself only when the engine has
// ContextWithFallback (otherwise *gin.Context.Value never reads the request
// context, and the cost is lost), as the package doc says.
func TestMeterFromGinContext(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fallback bool
		ctx      func(c *gin.Context) context.Context
		want     float64
	}{
		{"request context", false, func(c *gin.Context) context.Context { return c.Request.Context() }, 2},
		{"gin context with fallback", true, func(c *gin.Context) context.Context { return c }, 2},
		{"gin context without fallback", false, func(c *gin.Context) context.Context { return c }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newLimiter(t, 100, func(ratelimit.Identifier) {})
			r := gin.New()
			r.ContextWithFallback = tc.fallback
			r.Use(ratelimitgin.Middleware(nil, ratelimitgin.WithDeferred(ratelimitgin.Metered(db, "db_s"))))
			r.GET("/", func(c *gin.Context) {
				adapter.AddCost(tc.ctx(c), "db_s", 2)
				c.Status(204)
			})
			srv := httptest.NewServer(r)
			defer srv.Close()
			resp, err := srv.Client().Get(srv.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if c := db.Peek(context.Background(), ratelimit.Identifier{identifiers.IP: "127.0.0.1"}, ratelimit.Cost(0)).Count(); c != tc.want {
				t.Errorf("db_s charged %v, want %v", c, tc.want)
			}
		})
	}
}

// TestGinClientIP: c.ClientIP() is used only when asked for, and then follows
// the engine's trusted proxies; an engine that believes an arbitrary peer's
// forwarding headers (Gin's default) is refused at start-up, since any client
// would pick its own bucket.
func TestGinClientIP(t *testing.T) {
	trust := func(cidrs []string) func(*gin.Engine) error {
		return func(r *gin.Engine) error { return r.SetTrustedProxies(cidrs) }
	}
	for _, tc := range []struct {
		name      string
		engine    func(*gin.Engine) error // configures the engine; nil keeps Gin's defaults
		clientIP  bool                    // WithGinClientIP
		header    string                  // the forwarding header the client sends
		wantIP    string
		wantPanic string
	}{
		{name: "default ignores ClientIP's trust-all default", header: "X-Forwarded-For", wantIP: "127.0.0.1"},
		{name: "loopback trusted by the engine", engine: trust([]string{"127.0.0.1"}), clientIP: true, header: "X-Forwarded-For", wantIP: "198.51.100.1"},
		{name: "nobody trusted by the engine", engine: trust([]string{}), clientIP: true, header: "X-Forwarded-For", wantIP: "127.0.0.1"},
		{name: "proxies off", engine: trust(nil), clientIP: true, header: "X-Forwarded-For", wantIP: "127.0.0.1"},
		{name: "forwarding headers off", engine: func(r *gin.Engine) error { r.ForwardedByClientIP = false; return nil },
			clientIP: true, header: "X-Forwarded-For", wantIP: "127.0.0.1"},
		{name: "trusted platform, chosen by the service", engine: func(r *gin.Engine) error {
			r.TrustedPlatform = gin.PlatformCloudflare
			return r.SetTrustedProxies(nil)
		}, clientIP: true, header: "CF-Connecting-IP", wantIP: "198.51.100.1"},
		{name: "Gin's default engine refused", clientIP: true, wantPanic: "SetTrustedProxies"},
		{name: "every IPv4 peer trusted: refused", engine: trust([]string{"0.0.0.0/0"}), clientIP: true, wantPanic: "from 192.0.2.1"},
		{name: "every IPv6 peer trusted: refused", engine: trust([]string{"127.0.0.1", "::/0"}), clientIP: true, wantPanic: "from 2001:db8::1"},
		{name: "a header of the service's own, trusted from anyone: refused", engine: func(r *gin.Engine) error {
			r.RemoteIPHeaders = []string{"X-Client-IP"}
			return nil
		}, clientIP: true, wantPanic: "X-Client-IP"},
		{name: "a platform header anyone sends as X-Forwarded-For: refused", engine: func(r *gin.Engine) error {
			r.TrustedPlatform = "X-Forwarded-For"
			return r.SetTrustedProxies(nil)
		}, clientIP: true, wantPanic: "X-Forwarded-For"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var last ratelimit.Identifier
			r := gin.New()
			if tc.engine != nil {
				if err := tc.engine(r); err != nil {
					t.Fatal(err)
				}
			}
			var opts []ratelimitgin.Option
			if tc.clientIP {
				opts = append(opts, ratelimitgin.WithGinClientIP(r))
			}
			l := newLimiter(t, 100, func(id ratelimit.Identifier) { last = id })
			if tc.wantPanic != "" {
				checkPanics(t, tc.wantPanic, func() { ratelimitgin.Middleware(l, opts...) })
				return
			}
			r.Use(ratelimitgin.Middleware(l, opts...))
			r.GET("/", func(c *gin.Context) { c.Status(204) })
			srv := httptest.NewServer(r)
			defer srv.Close()
			req, _ := http.NewRequest("GET", srv.URL+"/", nil)
			req.Header.Set(tc.header, "198.51.100.1")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if last[identifiers.IP] != tc.wantIP {
				t.Errorf("ip = %v, want %s", last[identifiers.IP], tc.wantIP)
			}
		})
	}
}

// TestGinClientIPNilEngine: WithGinClientIP needs the engine to check it.
func TestGinClientIPNilEngine(t *testing.T) {
	checkPanics(t, "nil", func() { ratelimitgin.Middleware(newLimiter(t, 100, nil), ratelimitgin.WithGinClientIP(nil)) })
}

// checkPanics fails t unless f panics with a message holding the package's
// name and want.
func checkPanics(t *testing.T, want string, f func()) {
	t.Helper()
	msg := func() (msg any) {
		defer func() { msg = recover() }()
		f()
		return nil
	}()
	if s := fmt.Sprint(msg); !strings.HasPrefix(s, "ratelimitgin: WithGinClientIP: ") || !strings.Contains(s, want) {
		t.Errorf("panic %q, want one from ratelimitgin's WithGinClientIP naming %q", s, want)
	}
}

// The path property of a request served by a static route is the route's
// path, the one Gin routed on: an engine with RemoveExtraSlash serves
// //api/expensive from /api/expensive, which a rule on that path must
// count. A real server on loopback.
func TestPathIsTheRoutedPath(t *testing.T) {
	var seen []string
	l, err := ratelimit.New(ratelimit.Config{
		Name: "http", Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "expensive", Characteristics: []string{identifiers.IP}, Limit: 1, Period: time.Minute,
			Match: map[string]ratelimit.Matcher{identifiers.Path: ratelimit.Equal("/api/expensive")}, Action: ratelimit.ActionLimit}},
		Observer: func(_ context.Context, e ratelimit.Event) {
			seen = append(seen, fmt.Sprint(e.Identifier[identifiers.Path]))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		engine func(*gin.Engine)
		paths  []string // requested in order; the last must be blocked
	}{
		{"default engine", func(*gin.Engine) {}, []string{"/api/expensive", "/api/expensive"}},
		{"RemoveExtraSlash", func(e *gin.Engine) { e.RemoveExtraSlash = true }, []string{"/api/expensive", "//api/expensive"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := l.Clear(context.Background(), ratelimit.Identifier{identifiers.IP: "127.0.0.1"}); err != nil {
				t.Fatal(err)
			}
			seen = nil
			r := gin.New()
			tc.engine(r)
			r.Use(ratelimitgin.Middleware(l))
			r.GET("/api/expensive", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
			srv := httptest.NewServer(r)
			defer srv.Close()
			var last int
			for _, p := range tc.paths {
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				req.URL.Path = p // as sent: the client would clean //
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				last = resp.StatusCode
			}
			if last != http.StatusTooManyRequests {
				t.Errorf("the second request of %v: %d, want 429 (paths seen %q)", tc.paths, last, seen)
			}
		})
	}
}
