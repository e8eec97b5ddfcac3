package ratelimit_test

import (
	"context"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// TestBlockedCacheAlgorithms: a client banned by a sliding window or token
// bucket rule is answered without the store until the ban ends, as with a
// fixed window, on every store.
func TestBlockedCacheAlgorithms(t *testing.T) {
	for _, alg := range []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.TokenBucket} {
		for name := range cacheStores(t, &fakeClock{}) {
			t.Run(string(alg)+"/"+name, func(t *testing.T) {
				clk := &fakeClock{t: time.Now()}
				store, prefix := cacheStores(t, clk)[name](t)
				cs := &countingStore{Store: store}
				r := bannedRule()
				r.Algorithm = alg
				l := cacheLimiter(t, cs, prefix, clk, ratelimit.BlockedCacheConfig{MaxAge: -1}, r)
				ctx := context.Background()
				id := ratelimit.Identifier{"user": "mallory"}
				for i := range 2 {
					if res := l.Check(ctx, id); res.Blocked() || res.Err != nil {
						t.Fatalf("check %d: %+v", i, res)
					}
				}
				first := l.Check(ctx, id)
				if !first.Blocked() || !first.Banned() || first.Err != nil {
					t.Fatalf("third check: want a banned block, got %+v", first)
				}
				for i := range 50 {
					clk.Add(100 * time.Millisecond)
					if res := l.Check(ctx, id); !res.Blocked() || !res.Banned() || !res.ResetAt().Equal(first.ResetAt()) {
						t.Fatalf("hammering check %d: want the cached ban, got %+v", i, res)
					}
				}
				if got := cs.evals.Load(); got != 3 {
					t.Fatalf("store calls = %d, want 3 (the banned client answered without the store)", got)
				}
			})
		}
	}
}
