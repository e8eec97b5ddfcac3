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

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/identifiers"
)

// NewHandler builds an example's handler: GET /hello behind the framework's
// rate-limit middleware checking limiter, believing forwarding headers only
// from tp.
type NewHandler func(limiter *ratelimit.Limiter, tp identifiers.TrustedProxies) (http.Handler, error)

// NewLimiter returns the examples' limiter: GET /hello, 5 requests per minute
// per client IP. keyPrefix isolates test runs on a shared Redis ("" for the
// default); obs (may be nil) receives every decision for metrics.
func NewLimiter(store ratelimit.Store, keyPrefix string, obs ratelimit.Observer) (*ratelimit.Limiter, error) {
	l, err := ratelimit.New(ratelimit.Config{
		Name:      "http_request",
		Store:     store,
		KeyPrefix: keyPrefix,
		Observer:  obs,
		Rules: []ratelimit.Rule{{
			Name:            "hello_per_ip",
			Description:     "5 requests per minute per client IP",
			Match:           map[string]ratelimit.Matcher{identifiers.Endpoint: ratelimit.Equal("GET /hello")},
			Characteristics: []string{identifiers.IP},
			Limit:           ratelimit.Static(5),
			Period:          ratelimit.StaticPeriod(time.Minute),
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	return l, nil
}

// Options configure Run.
type Options struct {
	Addr           string
	RedisURL       string   // "" for the embedded store
	KeyPrefix      string   // counter key prefix ("" for the default)
	TrustedProxies []string // CIDRs of proxies whose X-Forwarded-For is believed
	Ready          func(net.Addr)
}

// Main parses -addr and -trusted-proxies, reads REDIS_URL and serves the
// example until SIGINT or SIGTERM.
func Main(name string, newHandler NewHandler) {
	addr := flag.String("addr", "localhost:8080", "listen address")
	proxies := flag.String("trusted-proxies", "", "comma-separated CIDRs of proxies whose X-Forwarded-For is believed")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := Options{Addr: *addr, RedisURL: os.Getenv("REDIS_URL")}
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
	limiter, err := NewLimiter(store, o.KeyPrefix, obs.Observer())
	if err != nil {
		return err
	}
	limited, err := newHandler(limiter, tp)
	if err != nil {
		return err
	}
	// /metrics and /debug/ratelimit beside the rate-limited application.
	handler := http.NewServeMux()
	obs.Mount(handler, limiter)
	handler.Handle("/", limited)
	go obs.Run(ctx)
	lis, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.Addr, err)
	}
	log.Printf("%s: GET http://%s/hello, 5 requests per minute per client IP, store: %s; metrics at /metrics, debug page at /debug/ratelimit", name, lis.Addr(), what)
	if o.Ready != nil {
		o.Ready(lis.Addr())
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
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
