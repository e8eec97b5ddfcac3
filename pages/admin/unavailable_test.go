package admin_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/pages/admin"
)

// With Redis unreachable (refused, or hanging past the timeout) every page
// answers with a plain error and a save fails without a panic.
func TestRedisUnavailable(t *testing.T) {
	available, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(availableYAML))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, addr string }{
		{"refused", redistest.UnusedAddr(t)},
		{"hanging", redistest.Blackhole(t)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: tt.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = client.Close() })
			store, err := rulestore.New(client, rulestore.Options{Available: available, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			h, err := admin.New(admin.Options{Store: store, Available: available, Counters: redisstore.New(client),
				Authorize: allowAll, Timeout: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			f := &fixture{srv: srv}
			b := newBrowser(t, f)
			for _, q := range []string{"", "?limiter=api"} {
				code, body := b.get(q)
				if code != http.StatusBadGateway || !strings.Contains(body, "Could not read the rule store") {
					t.Fatalf("GET %q: %d\n%s", q, code, body)
				}
			}
			u, _ := url.Parse(srv.URL)
			tok := ""
			for _, c := range b.client.Jar.Cookies(u) {
				tok = c.Value
			}
			resp, body := b.post("?limiter=api", saveForm(tok, "", "x"), srv.URL)
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "Could not read the rule store") {
				t.Fatalf("save: %d\n%s", resp.StatusCode, body)
			}
		})
	}
}
