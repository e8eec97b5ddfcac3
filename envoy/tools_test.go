package ratekitenvoy_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
	"github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestToolsFindTheGatewayCounters: the counters the gateway writes for a
// descriptor with a value over DefaultMaxValueLen and a limit override are
// the ones the tools (ratekit explain and clear, the admin page) look for
// from the identifier as an operator has it, its raw value: the limiter's
// keys of keys.GatewayIdentifier, and the one key keys.Override accepts
// among those a SCAN finds.
func TestToolsFindTheGatewayCounters(t *testing.T) {
	for _, rc := range redisClients {
		t.Run(rc.name, func(t *testing.T) {
			ctx := context.Background()
			client := rc.client(t)
			prefix := redistest.Prefix(t)
			l := newLimiter(t, redisstore.New(client), prefix, nil)
			g := startGateway(t, l, nil, ratekitenvoy.Options{})
			long := strings.Repeat("u", ratekitenvoy.DefaultMaxValueLen+500)
			d := desc("generic_key", "api", "user", long, "remote_address", "10.0.0.9")
			d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_MINUTE}
			if resp := g.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}}); resp.GetOverallCode() != ok {
				t.Fatalf("answer %v", resp)
			}
			raw := ratelimit.Identifier{"generic_key": "api", "user": long, "remote_address": "10.0.0.9"}
			gid, stood := keys.GatewayIdentifier(raw)
			if !stood {
				t.Fatal("the value is not over the tools' bound")
			}
			userKey := func(id ratelimit.Identifier) (string, bool) {
				for _, k := range l.Keys(id) {
					if strings.Contains(k, ":per_user_api:") {
						n, err := client.Exists(ctx, k).Result()
						if err != nil {
							t.Fatal(err)
						}
						return k, n == 1
					}
				}
				t.Fatalf("no per_user_api key for %v", id)
				return "", false
			}
			// per_user_api counts the stand-in, not the raw value.
			if k, counted := userKey(gid); !counted {
				t.Errorf("per_user_api's key of the gateway identifier %s does not exist", k)
			}
			if k, counted := userKey(raw); counted {
				t.Errorf("per_user_api's key of the raw identifier %s exists", k)
			}
			var found []string
			scan := func(ctx context.Context, node redis.Cmdable) error {
				iter := node.Scan(ctx, 0, keys.GlobEscape(keys.Head(prefix, "edge")+":"+keys.OverrideRulePrefix)+"*", 1000).Iterator()
				for iter.Next(ctx) {
					if rule, period, chars, ok := keys.Override(iter.Val(), prefix, "edge", gid); ok {
						if rule != "envoy_override_60s" || period.Seconds() != 60 || !slices.Equal(chars, []string{"generic_key", "user", "remote_address"}) {
							t.Errorf("override %s: rule %s, window %v, characteristics %q", iter.Val(), rule, period, chars)
						}
						found = append(found, iter.Val())
					}
				}
				return iter.Err()
			}
			var err error
			if cc, isCluster := client.(*redis.ClusterClient); isCluster {
				err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
			} else {
				err = scan(ctx, client)
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(found) != 1 {
				t.Errorf("override counters found: %q, want one", found)
			}
		})
	}
}
