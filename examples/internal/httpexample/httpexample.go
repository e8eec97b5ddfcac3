// Package httpexample is the plumbing the three HTTP examples (nethttp, echo,
// gin) share, so that each example's main.go shows only what differs: how the
// framework's rate-limit middleware is wired. It parses the flags, picks the
// store (exampleutil.NewStore: embedded, or Redis when REDIS_URL is set) and
// serves until interrupted; tests check the example's promise of 5 requests
// per minute.
package httpexample

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/goredis"
	"github.com/ratekit/ratekit/internal/httpguard"
	"github.com/ratekit/ratekit/pages/admin"
)

// NewHandler builds an example's handler: GET /hello behind the framework's
// rate-limit middleware checking limiter, believing forwarding headers only
// from tp.
type NewHandler func(limiter *ratelimit.Limiter, tp identifiers.TrustedProxies) (http.Handler, error)

// The examples' prefixes in Redis, those of `ratekit --service examples`
// (exampleutil.Service).
const (
	KeyPrefix   = exampleutil.KeyPrefix
	RulesPrefix = exampleutil.RulesPrefix
)

// NewLimiter returns the examples' limiter: GET /hello, 5 requests per minute
// per client IP; /healthz and /readyz are never limited (skip_health_checks,
// an exemption that holds against every rule tier). keyPrefix isolates test
// runs on a shared Redis ("" for KeyPrefix); checkTimeout bounds each check
// on Redis (0 for ratelimit.DefaultTimeout); obs (may be nil) receives every
// decision for metrics.
func NewLimiter(store ratelimit.Store, keyPrefix string, checkTimeout time.Duration, obs func(context.Context, ratelimit.Event)) (*ratelimit.Limiter, error) {
	if keyPrefix == "" {
		keyPrefix = KeyPrefix
	}
	l, err := ratelimit.New(ratelimit.Config{
		Name:      "http_request",
		Store:     store,
		KeyPrefix: keyPrefix,
		Timeout:   checkTimeout,
		Observer:  obs,
		Rules: []ratelimit.Rule{{
			Name:        "skip_health_checks",
			Description: "Orchestrator probes are never limited",
			Action:      ratelimit.ActionSkip,
			Match:       map[string]ratelimit.Matcher{identifiers.Path: ratelimit.OneOf("/healthz", "/readyz")},
		}, {
			Name:            "hello_per_ip",
			Description:     "5 requests per minute per client IP",
			Match:           map[string]ratelimit.Matcher{identifiers.Endpoint: ratelimit.Equal("GET /hello")},
			Characteristics: []string{identifiers.IP},
			Limit:           5,
			Period:          time.Minute,
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	return l, nil
}

// Options configure Run.
type Options struct {
	Addr string // the public listener: the rate-limited application only
	// InternalAddr serves /metrics and /debug/ratelimit, which must never
	// be reachable from the public port ("" serves neither).
	InternalAddr string
	RedisURL     string // "" for the embedded store
	// AdminWriter, with Redis, lets the internal listener's admin page
	// (/admin/ratelimit/) publish rules, in this name; "" keeps it read-only.
	AdminWriter    string
	KeyPrefix      string        // counter key prefix ("" for KeyPrefix; tests isolate their runs)
	CheckTimeout   time.Duration // bounds each check on Redis before it fails open (0 for ratelimit.DefaultTimeout; -check-timeout)
	TrustedProxies []string      // CIDRs of proxies whose X-Forwarded-For is believed
	Ready          func(net.Addr)
	InternalReady  func(net.Addr) // told the internal listener's address (tests)
}

// Ports are each HTTP example's default listeners, distinct so that the
// examples run side by side (examples/README.md lists them).
var Ports = map[string]struct{ Addr, InternalAddr string }{
	"net/http": {"localhost:8080", "localhost:9100"},
	"echo":     {"localhost:8081", "localhost:9101"},
	"gin":      {"localhost:8082", "localhost:9102"},
}

// Main parses -addr, -internal-addr, -trusted-proxies, -admin-writer and
// -check-timeout, reads REDIS_URL and serves the example until SIGINT or
// SIGTERM.
func Main(name string, newHandler NewHandler) {
	// go-redis's own lines (a failed dial, two a second per server while
	// Redis is down, more through sentinels) came as plain text among the
	// log's records: the example logs the store's failures itself
	// (rate_limit_error, the breaker, the rule store's refresh), as
	// ratekit-envoy and the ratekit CLI do.
	goredis.Silence()
	ports := Ports[name]
	addr := flag.String("addr", ports.Addr, "listen address")
	internal := flag.String("internal-addr", ports.InternalAddr, `address of /metrics, /debug/ratelimit and (with REDIS_URL) /admin/ratelimit/, never the public one ("" for none)`)
	proxies := flag.String("trusted-proxies", "", "comma-separated CIDRs of proxies whose X-Forwarded-For is believed")
	writer := flag.String("admin-writer", "", "with REDIS_URL: let the admin page on the internal listener publish rules, in this name (read-only when empty)")
	var checkTimeout time.Duration
	exampleutil.CheckTimeoutFlag(&checkTimeout)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := Options{Addr: *addr, InternalAddr: *internal, RedisURL: os.Getenv("REDIS_URL"), AdminWriter: *writer, CheckTimeout: checkTimeout}
	if *proxies != "" {
		o.TrustedProxies = strings.Split(*proxies, ",")
	}
	if err := Run(ctx, name, o, newHandler); err != nil {
		log.Fatal(err)
	}
}

// Run serves the example until ctx ends.
func Run(ctx context.Context, name string, o Options, newHandler NewHandler) error {
	tp, err := identifiers.ParseTrustedProxies(o.TrustedProxies...)
	if err != nil {
		return err
	}
	store, what, closeStore, err := exampleutil.NewStore(ctx, o.RedisURL)
	if err != nil {
		return err
	}
	defer closeStore()
	obs := exampleutil.NewObservability()
	// OpenTelemetry traces and metrics when OTEL_EXPORTER_OTLP_ENDPOINT is set.
	stopOTel, err := obs.StartOTel(ctx, "ratekit_example_"+strings.NewReplacer("/", "", ".", "").Replace(name))
	if err != nil {
		return err
	}
	defer func() { _ = stopOTel(context.Background()) }()
	limiter, err := NewLimiter(store, o.KeyPrefix, o.CheckTimeout, obs.Observer())
	if err != nil {
		return err
	}
	limited, err := newHandler(limiter, tp)
	if err != nil {
		return err
	}
	go obs.Run(ctx)
	lis, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.Addr, err)
	}
	defer lis.Close()
	// Both listeners bound slow clients and header sizes as every ratekit
	// listener does (httpguard.Server).
	servers := []serving{{httpguard.Server(limited), lis}}
	log.Printf("%s: GET http://%s/hello, 5 requests per minute per client IP; /healthz and /readyz never limited; store: %s, counters under %q", name, lis.Addr(), what, limiter.KeyPrefix())
	if o.InternalAddr != "" {
		// /metrics and /debug/ratelimit on a listener of their own: the debug
		// page shows rules and recent blocks, nothing for the public port.
		mux := http.NewServeMux()
		var page http.Handler
		if o.RedisURL != "" {
			var stopRules func()
			page, stopRules, err = adminPage(ctx, o, limiter, obs)
			if err != nil {
				return err
			}
			defer stopRules()
			mux.Handle("/admin/ratelimit/", http.StripPrefix("/admin/ratelimit", page))
		}
		obs.Mount(mux, limiter)
		ilis, err := net.Listen("tcp", o.InternalAddr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", o.InternalAddr, err)
		}
		defer ilis.Close()
		servers = append(servers, serving{httpguard.Server(mux), ilis})
		log.Printf("%s: metrics at http://%s/metrics, debug page at http://%s/debug/ratelimit", name, ilis.Addr(), ilis.Addr())
		if page != nil {
			log.Printf("%s: admin page at http://%s/admin/ratelimit/ (rules under %q; `ratekit --service %s` reaches them)", name, ilis.Addr(), rulesPrefix(o), exampleutil.Service)
		}
		if o.InternalReady != nil {
			o.InternalReady(ilis.Addr())
		}
	}
	if o.Ready != nil {
		o.Ready(lis.Addr())
	}
	return serve(ctx, servers)
}

// AvailableLimiters declares the examples' limiter for the rule store, the
// admin page and `ratekit rules publish --available-limiters`: the
// properties its rules may use, and NewLimiter's rules as its defaults (a
// service keeps its defaults in this file only).
const AvailableLimiters = `available_limiters:
  http_request:
    description: "GET /hello of the HTTP examples"
    available_properties: [ip, ip_full, endpoint, path, user, method]
    allowed_skip_rules: [skip_health_checks]
    default_rules:
      - name: skip_health_checks
        description: "Orchestrator probes are never limited"
        action: skip
        match:
          path: {one_of: ["/healthz", "/readyz"]}
      - name: hello_per_ip
        description: "5 requests per minute per client IP"
        action: limit
        match: {endpoint: "GET /hello"}
        characteristics: [ip]
        limit: 5
        period_s: 60
`

// rulesPrefix is the rule store's prefix: RulesPrefix, or one derived from a
// test's own counter prefix.
func rulesPrefix(o Options) string {
	if o.KeyPrefix != "" {
		return "ratekit:rules:{" + o.KeyPrefix + "}:"
	}
	return RulesPrefix
}

// adminPage binds limiter to a Redis rule store (rules published there apply
// to it within a second), seeds its document with the limiter's default
// tier, shows its tiers on obs's debug page and returns the admin page that
// edits them.
func adminPage(ctx context.Context, o Options, limiter *ratelimit.Limiter, obs *exampleutil.Observability) (http.Handler, func(), error) {
	available, err := config.ParseAvailableLimiters("examples", []byte(AvailableLimiters))
	if err != nil {
		return nil, nil, err
	}
	// No ping: with Redis down the example starts all the same, as its
	// counter store does; the rule store connects when Redis answers and the
	// limiter runs on its local rules meanwhile.
	opt, err := redisstore.ParseURL(o.RedisURL) // its errors never show the URL's password
	if err != nil {
		return nil, nil, err
	}
	client := redis.NewUniversalClient(redisstore.GoRedisOptions(opt))
	rules, err := rulestore.New(client, rulestore.Options{Prefix: rulesPrefix(o), Available: available, Interval: time.Second})
	var local tiers.Set
	if err == nil {
		local, err = config.Tiers(available, nil, limiter.Name())
	}
	if err == nil {
		err = rules.Bind(limiter, local)
	}
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	// Seed the default tier into the limiter's document, as a service made
	// from the copier template does, so that `ratekit explain` and `ratekit
	// clear --service examples` find the rules without a file. Bounded: with
	// Redis down the example starts on its local rules all the same, and the
	// rule store seeds them at its first refresh that reaches Redis.
	sctx, cancelSeed := context.WithTimeout(ctx, 2*time.Second)
	if _, err := rules.SeedBound(sctx); err != nil {
		log.Printf("rate limit rules not seeded; the limiter runs on its local rules: %v", err) // says whether the seed is owed
	}
	cancelSeed()
	obs.Tiers = rules // the debug page shows the tiers the limiter enforces
	rctx, cancel := context.WithCancel(ctx)
	go rules.Run(rctx)
	var authorize admin.Authorizer
	if o.AdminWriter != "" {
		// An example: a real service authenticates the operator here.
		authorize = func(*http.Request) (string, bool) { return o.AdminWriter, true }
	}
	page, err := admin.New(admin.Options{Store: rules, Available: available, Counters: redisstore.New(client),
		KeyPrefix: limiter.KeyPrefix(), Authorize: authorize, AllowedHosts: obs.AllowedHosts})
	if err != nil {
		cancel()
		_ = client.Close()
		return nil, nil, err
	}
	return page, func() { cancel(); _ = client.Close() }, nil
}

// serving is one server and its listener.
type serving struct {
	srv *http.Server
	lis net.Listener
}

// serve runs every server until ctx ends or one fails, then shuts them all
// down and returns the first failure.
func serve(ctx context.Context, servers []serving) error {
	errc := make(chan error, len(servers))
	for _, s := range servers {
		go func() {
			err := s.srv.Serve(s.lis)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			} else if err != nil {
				err = fmt.Errorf("serve %s: %w", s.lis.Addr(), err)
			}
			errc <- err
		}()
	}
	var first error
	received := 0
	select {
	case <-ctx.Done():
	case first = <-errc:
		received++
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.srv.Shutdown(shutdown)
	}
	for ; received < len(servers); received++ {
		if err := <-errc; first == nil {
			first = err
		}
	}
	return first
}

// FiveThenBlocked sends six GET /hello to the server at url: five must pass
// and the sixth get 429 with Retry-After, a problem+json body and the
// example's RateLimit-Policy.
func FiveThenBlocked(t testing.TB, url string) {
	t.Helper()
	for i := 1; i <= 6; i++ {
		resp, err := http.Get(url + "/hello")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := http.StatusOK
		if i == 6 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d (%s), want %d", i, resp.StatusCode, body, want)
		}
		if i == 6 && (resp.Header.Get("Retry-After") == "" || resp.Header.Get("Content-Type") != "application/problem+json") {
			t.Errorf("429 without Retry-After or problem+json: %v", resp.Header)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != `"hello_per_ip";q=5;w=60` {
			t.Errorf("request %d: RateLimit-Policy %q", i, got)
		}
	}
}
