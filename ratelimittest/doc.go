// Package ratelimittest helps test code that uses a ratelimit.Limiter: a
// Clock the test moves by hand, and a Store that counts in memory on that
// clock and lets the test read what was counted and banned, and make the
// store fail (to test the fail-open path). Limiter.Clear lifts bans, as on
// any store.
//
// Wire both into the limiter under test:
//
//	clock := ratelimittest.NewClock(time.Time{})
//	store := ratelimittest.NewStore(clock)
//	l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: store, Now: clock.Now, Rules: rules})
//	if err != nil {
//		t.Fatal(err)
//	}
//
// Then drive traffic through the code under test, Advance the clock past a
// window or a ban instead of sleeping, and read counts with RuleCount (by
// limiter, rule and identifier) or Count (by key). The counting itself is
// ratelimit's own memory store, so the verdicts are the ones production code
// sees with ratelimit.NewMemoryStore; only time and failures are the test's.
package ratelimittest
