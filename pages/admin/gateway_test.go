package admin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/redistest"
)

// A value over keys.GatewayMaxValueLen is counted by ratekit-envoy as its
// stand-in (keys.GatewayIdentifier): given the raw value, as an operator
// has it, the explain box shows the stand-in's counts and says so, and
// "lift ban / clear" removes them. Both showed and cleared nothing before.
func TestExplainAndClearALongGatewayValue(t *testing.T) {
	for name, client := range map[string]func(t *testing.T) redisClient{
		"standalone": func(t *testing.T) redisClient { return redistest.Client(t) },
		"cluster":    func(t *testing.T) redisClient { return redistest.ClusterClient(t) },
	} {
		t.Run(name, func(t *testing.T) {
			c := client(t)
			f := newFixtureOn(t, c, allowAll)
			b := newBrowser(t, f)
			limiter := f.serviceLimiter(t, c, ratelimit.Rule{Name: "per_user", Characteristics: []string{"user"}, Limit: 50, Period: time.Minute, Action: ratelimit.ActionLog})
			long := strings.Repeat("u", 1500)
			gid, _ := keys.GatewayIdentifier(map[string]any{"user": long})
			for range 3 { // the gateway's checks
				if res := limiter.Check(ctx, gid); res.Err != nil {
					t.Fatal(res.Err)
				}
			}
			_, body := b.get("?limiter=api&explain=1&id.user=" + long)
			if !strings.Contains(body, `data-rule="per_user" data-state="allow"`) || !strings.Contains(body, `<td class="num">3 / 50</td>`) ||
				!strings.Contains(body, `id="gateway-note">A value is over 1024 bytes`) || !strings.Contains(body, "shown, the identifier as the gateway counts it.") {
				t.Fatalf("explain of the raw value does not show the gateway's count of 3:\n%s", body)
			}
			resp, body := b.post("?limiter=api", url.Values{"csrf": {b.csrf()}, "op": {"clear"}, "limiter": {"api"},
				"confirm": {"yes"}, "id.user": {long}}, f.srv.URL)
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("clear: %d\n%s", resp.StatusCode, body)
			}
			if _, body = b.get(resp.Header.Get("Location")); !strings.Contains(body, "Cleared 1 counter and ban key(s) for the identifier.") {
				t.Fatalf("the page after the clear:\n%s", body)
			}
			for _, k := range limiter.Keys(gid) {
				if n, err := c.Exists(ctx, k).Result(); err != nil || n != 0 {
					t.Errorf("after the clear %s: exists %d, %v", k, n, err)
				}
			}
		})
	}
}
