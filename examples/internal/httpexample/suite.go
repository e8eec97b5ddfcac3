package httpexample

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/redistest"
)

// Test is each HTTP example's test: its handler on httptest.NewServer with
// the embedded store and with the test Redis, then the whole program (Run)
// on a loopback port; every time the sixth GET /hello must get 429.
func Test(t *testing.T, name string, newHandler NewHandler) {
	stores := []struct {
		name  string
		store func(t *testing.T) ratelimit.Store
	}{
		{"memory", func(*testing.T) ratelimit.Store { return ratelimit.NewMemoryStore() }},
		{"redis", func(t *testing.T) ratelimit.Store { return redisstore.New(redistest.Client(t)) }},
	}
	for _, s := range stores {
		t.Run("handler_"+s.name, func(t *testing.T) {
			l, err := NewLimiter(s.store(t), redistest.Prefix(t), exampleutil.TestCheckTimeout, nil)
			if err != nil {
				t.Fatal(err)
			}
			h, err := newHandler(l, identifiers.TrustedProxies{})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			FiveThenBlocked(t, srv.URL)
		})
	}
	for _, mode := range []string{"memory", "redis"} {
		t.Run("run_"+mode, func(t *testing.T) {
			o := Options{Addr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0", KeyPrefix: redistest.Prefix(t), CheckTimeout: exampleutil.TestCheckTimeout}
			if mode == "redis" {
				o.RedisURL = redistest.URL(t)
			}
			ctx, cancel := context.WithCancel(context.Background())
			addrc, internalc, done := make(chan net.Addr, 1), make(chan net.Addr, 1), make(chan error, 1)
			o.Ready = func(a net.Addr) { addrc <- a }
			o.InternalReady = func(a net.Addr) { internalc <- a }
			go func() { done <- Run(ctx, name, o, newHandler) }()
			select {
			case a := <-addrc:
				public, internal := "http://"+a.String(), "http://"+(<-internalc).String()
				FiveThenBlocked(t, public)
				exampleutil.Observed(t, internal, "http_request", "hello_per_ip")
				exampleutil.NotServed(t, public)
				exampleutil.HeadersBounded(t, public)
				exampleutil.HeadersBounded(t, internal)
				if mode == "redis" {
					adminServed(t, internal)
					incidentRuleSparesHealthChecks(t, public, internal, o)
				}
			case err := <-done:
				t.Fatalf("run: %v", err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Run("run_redis_down", func(t *testing.T) { runRedisDown(t, name, newHandler) })
	t.Run("bad_trusted_proxies", func(t *testing.T) {
		o := Options{Addr: "127.0.0.1:0", TrustedProxies: []string{"not-a-cidr"}}
		if err := Run(context.Background(), name, o, newHandler); err == nil {
			t.Error("Run accepted an invalid trusted proxy")
		}
	})
}

// runRedisDown runs the whole program with REDIS_URL naming a port where
// nothing listens: it must start all the same (the store connects in the
// background) and fail open, so a Redis outage never takes the example down
// at start-up; the admin page is mounted and answers.
func runRedisDown(t *testing.T, name string, newHandler NewHandler) {
	down := "redis://" + redistest.UnusedAddr(t) + "/0" // held: nothing can listen there meanwhile
	o := Options{Addr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0", RedisURL: down, KeyPrefix: redistest.Prefix(t)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc, internalc, done := make(chan net.Addr, 1), make(chan net.Addr, 1), make(chan error, 1)
	o.Ready = func(a net.Addr) { addrc <- a }
	o.InternalReady = func(a net.Addr) { internalc <- a }
	go func() { done <- Run(ctx, name, o, newHandler) }()
	select {
	case a := <-addrc:
		public, internal := "http://"+a.String(), "http://"+(<-internalc).String()
		for i := 1; i <= 6; i++ { // over the limit of 5: the checks fail open
			if code := status(t, public+"/hello"); code != http.StatusOK {
				t.Fatalf("GET /hello #%d with Redis down: %d, want 200 (fail open)", i, code)
			}
		}
		if code := status(t, internal+"/admin/ratelimit/"); code == http.StatusNotFound {
			t.Errorf("GET /admin/ratelimit/ with Redis down: 404, want the admin page mounted")
		}
	case err := <-done:
		t.Fatalf("run with Redis down: %v, want it to start and fail open", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// adminServed checks that the internal listener serves the admin page, read
// only (no writer configured): it lists the limiter and offers no form.
func adminServed(t *testing.T, internal string) {
	t.Helper()
	resp, err := http.Get(internal + "/admin/ratelimit/?limiter=http_request")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "http_request") || !strings.Contains(string(b), "hello_per_ip") {
		t.Fatalf("internal GET /admin/ratelimit/?limiter=http_request: %d %q", resp.StatusCode, b)
	}
	resp, err = http.PostForm(internal+"/admin/ratelimit/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a write to the read-only admin page: %d, want 403", resp.StatusCode)
	}
}

// incidentRuleSparesHealthChecks publishes an incident rule matching every
// request (limit 2 per IP) into the example's rule store: once it is
// enforced, /hello is blocked but /healthz and /readyz answer 200 every time (the
// default skip_health_checks holds against the published tier), and the
// debug page shows the tiers the limiter enforces.
func incidentRuleSparesHealthChecks(t *testing.T, public, internal string, o Options) {
	t.Helper()
	available, err := config.ParseAvailableLimiters("examples", []byte(AvailableLimiters))
	if err != nil {
		t.Fatal(err)
	}
	store, err := rulestore.New(redistest.Client(t), rulestore.Options{Prefix: rulesPrefix(o), Available: available})
	if err != nil {
		t.Fatal(err)
	}
	req, err := config.ParsePublishRulesRequest("incident.yaml", []byte(`rate_limits:
  http_request:
    rules:
      - name: incident_per_ip
        action: limit
        match: {}
        characteristics: [ip]
        limit: 2
        period_s: 60
`), available)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Publish(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	// The example refreshes its replica every second: wait until the
	// debug page lists the published rule.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(getBody(t, internal+"/debug/ratelimit?format=json"), `"incident_per_ip"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the published rule never reached the debug page: %s", getBody(t, internal+"/debug/ratelimit?format=json"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	page := getBody(t, internal+"/debug/ratelimit")
	if strings.Contains(page, "not managed by a rule store") || !strings.Contains(page, "published") {
		t.Errorf("the debug page does not show the limiter's tiers:\n%s", page)
	}
	for _, probe := range []string{"/healthz", "/readyz"} {
		for i := 1; i <= 6; i++ {
			resp, err := http.Get(public + probe)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s #%d under a match-all incident rule: %d %s, want 200", probe, i, resp.StatusCode, b)
			}
		}
	}
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
