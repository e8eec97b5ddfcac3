package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/keys"
)

// TestClearAndExplainSeeTheGatewayCounters: ratekit-envoy counts two things
// under keys a limiter's rules do not name: a descriptor value over
// keys.GatewayMaxValueLen by its stand-in (keys.GatewayIdentifier), and a
// descriptor's limit override by a per-request rule (keys.OverrideRule)
// over the descriptor's keys in its order. The checks here are the
// gateway's (the envoy module's TestToolsFindTheGatewayCounters pins that it
// writes these keys); explain shows them and clear removes them, given the
// identifier as an operator has it: the raw value, the properties in any
// order. Other identifiers' override counters are left.
func TestClearAndExplainSeeTheGatewayCounters(t *testing.T) {
	forEachDeployment(t, func(t *testing.T, d deployment) {
		e := newExplainEnv(t, d.client, d.url, d.cluster)
		ctx := context.Background()
		clear := func(extra ...string) (string, string, int) {
			args := append([]string{"clear"}, e.flags()[1:]...)
			return e.run(t, append(args, extra...)...)
		}
		exists := func(k string) bool {
			n, err := d.client.Exists(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		}

		// A user value of 1500 bytes: per_user (limit 3 for request_type
		// api) counts the stand-in; the fourth check blocks.
		t.Run("long value", func(t *testing.T) {
			long := "u" + strings.Repeat("x", 1499)
			raw := ratelimit.Identifier{"user": long, "request_type": "api"}
			gid, stood := keys.GatewayIdentifier(raw)
			if !stood {
				t.Fatal("setup: the value is not over the gateway's bound")
			}
			e.check(t, 4, gid)
			ex := e.explainJSON(t, "user="+long, "request_type=api")
			if r := ruleByName(ex, "per_user"); r == nil || r.State != stateBlock || r.Count == nil || *r.Count != 4 {
				t.Fatalf("explain of the raw value: per_user %+v, want blocked at count 4 (the gateway's counter)", r)
			}
			if ex.Identifier["user"] != long {
				t.Errorf("explain shows the identifier %q, want the value as given", ex.Identifier["user"])
			}
			stdout, stderr, code := clear("user="+long, "request_type=api")
			if code != 0 || !strings.Contains(stdout, "cleared 1 key\n") || !strings.Contains(stderr, "over 1024 bytes") {
				t.Fatalf("clear of the raw value: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			for _, k := range e.limiter.Keys(gid) {
				if exists(k) {
					t.Errorf("after clear %s is left", k)
				}
			}
		})

		t.Run("override", func(t *testing.T) {
			// A limit override of 2 a minute over [user, ip], as the gateway
			// compiles it; the third check blocks. Beside it, the override
			// counters of two other identifiers: carol alone, and carol from
			// another address.
			over := func(n int, id ratelimit.Identifier, chars ...string) string {
				set, err := ratelimit.CompileRules("", []ratelimit.Rule{{Name: keys.OverrideRule(time.Minute),
					Characteristics: chars, Limit: 2, Period: time.Minute, Action: ratelimit.ActionLimit}})
				if err != nil {
					t.Fatal(err)
				}
				for range n {
					if r := e.limiter.Check(ctx, id, ratelimit.WithRules(set)); r.Err != nil {
						t.Fatal(r.Err)
					}
				}
				k, _ := keys.Counter(e.prefix, "api_request", keys.OverrideRule(time.Minute), chars, "", id)
				if !exists(k) {
					t.Fatalf("setup: no override counter %s", k)
				}
				return k
			}
			carol := ratelimit.Identifier{"user": "carol", "ip": "10.0.0.7"}
			key := over(3, carol, "user", "ip")
			others := []string{
				over(1, ratelimit.Identifier{"user": "carol"}, "user"),
				over(1, ratelimit.Identifier{"user": "carol", "ip": "10.0.0.8"}, "user", "ip"),
			}
			ex := e.explainJSON(t, "ip=10.0.0.7", "user=carol")
			if len(ex.GatewayOverrides) != 1 || ex.GatewayOverrides[0].Key != key || ex.GatewayOverrides[0].Rule != "envoy_override_60s" ||
				ex.GatewayOverrides[0].WindowS != 60 || ex.GatewayOverrides[0].Count == nil || *ex.GatewayOverrides[0].Count != 3 {
				t.Fatalf("explain: gateway overrides %+v, want %s at count 3", ex.GatewayOverrides, key)
			}
			stdout, stderr, code := e.run(t, e.flags("ip=10.0.0.7", "user=carol")...)
			if code != 0 || !strings.Contains(stdout, "  envoy_override_60s: count 3 in a window of 1m0s, resets in ") {
				t.Fatalf("explain: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			stdout, stderr, code = clear("ip=10.0.0.7", "user=carol")
			if code != 0 || !strings.Contains(stdout, "  removed gateway limit-override counter "+key+"\n") {
				t.Fatalf("clear: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			if exists(key) {
				t.Errorf("after clear the override counter %s is left", key)
			}
			for _, k := range others {
				if !exists(k) {
					t.Errorf("clear of carol at 10.0.0.7 removed %s", k)
				}
			}
			// Only the override counter of an identifier left: a clear of it
			// alone succeeds (it found something), and says what it removed.
			stdout, stderr, code = clear("user=carol")
			if code != 0 || !strings.Contains(stdout, "  removed gateway limit-override counter "+others[0]+"\n") || !strings.HasSuffix(stdout, "cleared 1 key\n") {
				t.Fatalf("clear of carol alone: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
		})
	})
}

// ruleByName returns the explanation of the rule named name, or nil.
func ruleByName(ex explanation, name string) *ruleExplanation {
	for i := range ex.Rules {
		if ex.Rules[i].Name == name {
			return &ex.Rules[i]
		}
	}
	return nil
}

// A key only a gateway override counter counts by is no stray key of the
// identifier: explain and clear warned, without --available-limiters, that
// no rule used it.
func TestOverrideKeysAreUsed(t *testing.T) {
	id := ratelimit.Identifier{"user": "carol", "tenant": "t1"}
	rules := []ratelimit.Rule{{Name: "per_user", Characteristics: []string{"user"}}}
	if w := identifierWarnings(id, nil, rules); len(w) != 1 || !strings.Contains(w[0], `"tenant"`) {
		t.Fatalf("setup: warnings %q, want one about tenant", w)
	}
	o := gatewayOverrides{found: []gatewayOverride{{Rule: keys.OverrideRule(time.Minute), chars: []string{"tenant"}}}}
	if w := identifierWarnings(id, nil, slices.Concat(rules, o.rules())); len(w) != 0 {
		t.Errorf("warnings %q, want none: the override counts by tenant", w)
	}
}
