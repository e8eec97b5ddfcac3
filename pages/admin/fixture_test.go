package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
	"github.com/ratekit/ratekit/pages/admin"
)

var ctx = context.Background()

const availableYAML = `available_limiters:
  api:
    description: "public API"
    available_properties: [ip, user, path]
    allowed_skip_rules: [trusted_ip]
    default_rules:
      - name: per_ip
        characteristics: [ip]
        limit: 100
        period_s: 60
        action: limit
      - name: trusted_ip
        match: {ip: {one_of: ["10.0.0.1"]}}
        action: skip
  jobs:
    description: "background jobs"
    available_properties: [queue]
    allowed_skip_rules: [skip_health_checks]
    default_rules:
      - name: skip_health_checks
        match: {queue: health}
        action: skip
`

const rateLimitsYAML = `rate_limits:
  api:
    - name: per_user
      characteristics: [user]
      limit: 50
      period_s: 60
      action: log
`

// fixture is a rule store on the test Redis, seeded with the files' tiers,
// and the admin page on a loopback HTTP server.
type fixture struct {
	client    redisClient
	store     *rulestore.Store
	available *config.AvailableLimiters
	keyPrefix string
	srv       *httptest.Server
	audit     *testlog.Buffer
}

// redisClient is the standalone or the cluster client of the tests.
type redisClient interface {
	redis.UniversalClient
}

// newFixture builds the fixture on the standalone test server; authorize is
// the page's hook (nil: read-only).
func newFixture(t *testing.T, authorize admin.Authorizer) *fixture {
	t.Helper()
	return newFixtureOn(t, redistest.Client(t), authorize)
}

// newFixtureOn builds the fixture on client; more changes the page's options.
func newFixtureOn(t *testing.T, client redisClient, authorize admin.Authorizer, more ...func(*admin.Options)) *fixture {
	t.Helper()
	f := &fixture{client: client, audit: &testlog.Buffer{}}
	prefix := redistest.Prefix(t)
	f.keyPrefix = prefix + "c:"
	var err error
	if f.available, err = config.ParseAvailableLimiters("available_limiters.yaml", []byte(availableYAML)); err != nil {
		t.Fatal(err)
	}
	rl, err := config.ParseRateLimits("rate_limits.yaml", []byte(rateLimitsYAML), f.available)
	if err != nil {
		t.Fatal(err)
	}
	if f.store, err = rulestore.New(f.client, rulestore.Options{Prefix: prefix + "{rules}:", Available: f.available,
		Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	sets, err := rulestore.ConfigTiers(f.available, rl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Seed(ctx, sets); err != nil {
		t.Fatal(err)
	}
	opts := admin.Options{Store: f.store, Available: f.available, RateLimits: rl,
		Counters: redisstore.New(f.client), KeyPrefix: f.keyPrefix, Authorize: authorize,
		Logger: slog.New(slog.NewJSONHandler(f.audit, nil))}
	for _, m := range more {
		m(&opts)
	}
	h, err := admin.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/ratelimit/", http.StripPrefix("/admin/ratelimit", h))
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// serviceLimiter is a service's "api" limiter with rules, counting on client
// under the page's prefix. Its checks must succeed: its timeout is 10s, not
// the default 100ms, which a loaded machine descheduling a check on Redis
// that long would hit.
func (f *fixture) serviceLimiter(t *testing.T, client redis.UniversalClient, rules ...ratelimit.Rule) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: redisstore.New(client), KeyPrefix: f.keyPrefix, Rules: rules,
		Timeout: 10 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// url is the page's address: under /admin/ratelimit/ on the fixture's mux,
// at the root of a bare handler's server.
func (f *fixture) url() string {
	if f.store == nil {
		return f.srv.URL + "/"
	}
	return f.srv.URL + "/admin/ratelimit/"
}

// allowAll is an authorization hook that lets "alice" write.
func allowAll(*http.Request) (string, bool) { return "alice", true }

// browser is an HTTP client with a cookie jar that sends the page's Origin
// on POST, as a browser does.
type browser struct {
	t      *testing.T
	f      *fixture
	client *http.Client
}

func newBrowser(t *testing.T, f *fixture) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, f: f, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) get(query string) (int, string) {
	b.t.Helper()
	resp, err := b.client.Get(b.f.url() + query)
	if err != nil {
		b.t.Fatal(err)
	}
	return readBody(b.t, resp)
}

// post sends form with the Origin header origin ("" for none).
func (b *browser) post(query string, form url.Values, origin string) (*http.Response, string) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.f.url()+query, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	_, body := readBody(b.t, resp)
	return resp, body
}

// csrf returns this browser's CSRF token (the cookie a GET of the page
// sets), which the page's forms carry.
func (b *browser) csrf() string {
	b.t.Helper()
	b.get("?limiter=api")
	u, _ := url.Parse(b.f.url())
	for _, c := range b.client.Jar.Cookies(u) {
		if c.Name == "ratekit_admin_csrf" {
			return c.Value
		}
	}
	b.t.Fatal("the page set no CSRF cookie")
	return ""
}

func readBody(t *testing.T, resp *http.Response) (int, string) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// storeState is every key of the fixture's rule store and counters with its
// value: what "nothing was written" compares.
func (f *fixture) storeState(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	prefix := strings.TrimSuffix(f.keyPrefix, "c:")
	var keys []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		return iter.Err()
	}
	var err error
	if cc, ok := f.client.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, c)
		})
	} else {
		err = scan(ctx, f.client)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		switch f.client.Type(ctx, k).Val() {
		case "string":
			out[k] = f.client.Get(ctx, k).Val()
		case "set":
			out[k] = strings.Join(f.client.SMembers(ctx, k).Val(), ",")
		default:
			out[k] = f.client.Type(ctx, k).Val()
		}
	}
	return out
}

// saveForm is a valid form publishing rule name on limiter api.
func saveForm(csrf, version, name string) url.Values {
	return url.Values{"csrf": {csrf}, "op": {"save"}, "limiter": {"api"}, "version": {version}, "mode": {"add"},
		"name": {name}, "action": {"limit"}, "limit": {"2"}, "period_s": {"60"}, "characteristics": {"user"}}
}
