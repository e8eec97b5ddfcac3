package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/keys"
)

// The counters ratekit-envoy keeps apart from a limiter's rules for an
// identifier: those of a descriptor's limit override (a per-request rule
// no tier holds), found by a bounded SCAN, since their window and the
// order of the descriptor's keys are the gateway's request's, not the
// limiter's. Their shape is internal/keys' (keys.Override).

// gatewayOverride is the counter of one limit override.
type gatewayOverride struct {
	Key     string     `json:"key"`
	Rule    string     `json:"rule"`
	WindowS int64      `json:"window_s"`
	Count   *float64   `json:"count,omitempty"`
	ResetAt *time.Time `json:"reset_at,omitempty"`
	chars   []string   // the descriptor's keys, in its order
}

// gatewayOverrides is what one search found.
type gatewayOverrides struct {
	found []gatewayOverride
	// truncated: a node held more than maxScanKeys keys under the pattern,
	// so an override counter may have been left unseen.
	truncated bool
}

// findOverrides returns the limit-override counters ratekit-envoy keeps for
// gid (the identifier as the gateway hands it to the limiter, see
// keys.GatewayIdentifier) under prefix: one SCAN per node of the keys that
// start as an override counter of the limiter does, at most maxScanKeys a
// node.
func findOverrides(ctx context.Context, client redis.UniversalClient, prefix, limiter string, gid ratelimit.Identifier, timeout time.Duration) (gatewayOverrides, error) {
	var out gatewayOverrides
	if len(gid) == 0 {
		return out, nil
	}
	pattern := keys.GlobEscape(keys.Head(prefix, limiter)+":"+keys.OverrideRulePrefix) + "*"
	// The longest such key of gid: the longest window's name, its
	// properties in any order (the order changes no length).
	props := make([]string, 0, len(gid))
	for k := range gid {
		props = append(props, k)
	}
	longest, _ := keys.Counter(prefix, limiter, keys.OverrideRule(math.MaxInt64), props, "", gid)
	truncated, err := scanNodes(ctx, client, pattern, len(longest), timeout, func(found []string) {
		for _, k := range found {
			if rule, period, chars, ok := keys.Override(k, prefix, limiter, gid); ok {
				out.found = append(out.found, gatewayOverride{Key: k, Rule: rule, WindowS: int64(period / time.Second), chars: chars})
			}
		}
	})
	out.truncated = truncated
	if err != nil {
		return out, fmt.Errorf("search the gateway's limit-override counters: %w", err)
	}
	slices.SortFunc(out.found, func(a, b gatewayOverride) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// peek reads each counter's count and window end as the gateway's check
// reads them (a limiter of the override's rule alone, peeking): its limit
// comes with each request and is kept nowhere, so whether it blocks is not
// known here.
func (o *gatewayOverrides) peek(ctx context.Context, store ratelimit.Store, prefix, limiter string, gid ratelimit.Identifier, timeout time.Duration) error {
	for i := range o.found {
		g := &o.found[i]
		l, err := ratelimit.New(ratelimit.Config{
			Name: limiter, Store: store, KeyPrefix: prefix, Timeout: timeout,
			Breaker: ratelimit.BreakerConfig{Failures: -1},
			Logger:  slog.New(slog.DiscardHandler),
			Rules: []ratelimit.Rule{{Name: g.Rule, Characteristics: g.chars, Limit: 1,
				Period: time.Duration(g.WindowS) * time.Second, Action: ratelimit.ActionLog}},
		})
		if err != nil {
			return fmt.Errorf("read %s: %w", g.Key, err)
		}
		res := l.Peek(ctx, gid, ratelimit.Cost(0))
		if res.Err != nil {
			return fmt.Errorf("read %s: %w", g.Key, res.Err)
		}
		for _, e := range res.Evaluations {
			if e.Rule.Name == g.Rule {
				count, reset := e.Info.Count, e.Info.ResetAt
				g.Count, g.ResetAt = &count, &reset
			}
		}
	}
	return nil
}

// truncatedNote says that the search for override counters stopped at its
// bound, or "".
func (o *gatewayOverrides) truncatedNote() string {
	if !o.truncated {
		return ""
	}
	return fmt.Sprintf("the search for the gateway's limit-override counters stopped after %d keys per node: such a counter of this identifier may exist unseen", maxScanKeys)
}

// gatewayValueNote says that the identifier holds a value the gateway
// counts by a stand-in, or "".
func gatewayValueNote(long bool) string {
	if !long {
		return ""
	}
	return fmt.Sprintf("a value of the identifier is over %d bytes: ratekit-envoy counts a descriptor value so long as its first %d bytes, a tilde and a digest of the whole, under keys of their own", keys.GatewayMaxValueLen, keys.GatewayMaxValueLen-33)
}

// rules returns the rules of the override counters found, for what keys
// they count by.
func (o gatewayOverrides) rules() []ratelimit.Rule {
	out := make([]ratelimit.Rule, len(o.found))
	for i, g := range o.found {
		out[i] = ratelimit.Rule{Name: g.Rule, Characteristics: g.chars}
	}
	return out
}

// overrideKeysOf returns the keys of the override counters found.
func overrideKeysOf(o gatewayOverrides) []string {
	out := make([]string, len(o.found))
	for i, g := range o.found {
		out[i] = g.Key
	}
	return out
}
