package ratelimittest_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/ratelimittest"
)

func TestClock(t *testing.T) {
	c := ratelimittest.NewClock(time.Time{})
	if !c.Now().Equal(ratelimittest.Start) {
		t.Fatalf("zero start: %v", c.Now())
	}
	c.Advance(90 * time.Second)
	if got := c.Now().Sub(ratelimittest.Start); got != 90*time.Second {
		t.Fatalf("after Advance: %v", got)
	}
	at := time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)
	c.Set(at)
	if !c.Now().Equal(at) || !ratelimittest.NewClock(at).Now().Equal(at) {
		t.Fatal("Set or a given start is not kept")
	}
	var wg sync.WaitGroup // safe for concurrent use (run with -race)
	for range 4 {
		wg.Go(func() { c.Advance(time.Second); _ = c.Now() })
	}
	wg.Wait()
	if got := c.Now().Sub(at); got != 4*time.Second {
		t.Fatalf("concurrent Advance: %v", got)
	}
}

func newLimiter(t *testing.T, store *ratelimittest.Store, rules ...ratelimit.Rule) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: store, Now: store.Clock().Now, Rules: rules,
		Breaker: ratelimit.BreakerConfig{Failures: -1}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The store counts as the memory store does, on the test's clock.
func TestStoreCounts(t *testing.T) {
	ctx := context.Background()
	distinct := ratelimit.Rule{Name: "paths_per_user", Characteristics: []string{"user"}, Limit: 2, Period: time.Hour}
	distinct.CountDistinct = "path"
	distinct.Action = ratelimit.ActionLog
	for _, tt := range []struct {
		name    string
		rule    ratelimit.Rule
		ids     []ratelimit.Identifier
		advance time.Duration
		count   float64 // of the rule for ids[0], after advance
		last    ratelimit.Verdict
	}{
		{"within the window", ratelimit.Rule{Name: "per_user", Characteristics: []string{"user"}, Limit: 2, Period: time.Minute},
			[]ratelimit.Identifier{{"user": "a"}, {"user": "a"}, {"user": "a"}}, 59 * time.Second, 3, ratelimit.ActionBlock},
		{"window over", ratelimit.Rule{Name: "per_user", Characteristics: []string{"user"}, Limit: 2, Period: time.Minute},
			[]ratelimit.Identifier{{"user": "a"}, {"user": "a"}, {"user": "a"}}, time.Minute, 0, ratelimit.ActionAllow},
		{"per characteristic", ratelimit.Rule{Name: "per_user", Characteristics: []string{"user"}, Limit: 2, Period: time.Minute},
			[]ratelimit.Identifier{{"user": "a"}, {"user": "b"}, {"user": "b"}}, 0, 1, ratelimit.ActionAllow},
		{"distinct values", distinct,
			[]ratelimit.Identifier{{"user": "a", "path": "/x"}, {"user": "a", "path": "/x"}, {"user": "a", "path": "/y"}}, 0, 2, ratelimit.ActionAllow},
		// The sliding window's estimate: 2 in the previous window, weighted by
		// the half of it still inside the sliding minute.
		{"sliding window", ratelimit.Rule{Name: "per_user", Characteristics: []string{"user"}, Limit: 2, Period: time.Minute, Algorithm: ratelimit.SlidingWindow},
			[]ratelimit.Identifier{{"user": "a"}, {"user": "a"}, {"user": "a"}}, 90 * time.Second, 1, ratelimit.ActionAllow},
		// A token bucket's tokens in use: 2 taken, one back after 30s.
		{"token bucket", ratelimit.Rule{Name: "per_user", Characteristics: []string{"user"}, Limit: 2, Period: time.Minute, Algorithm: ratelimit.TokenBucket},
			[]ratelimit.Identifier{{"user": "a"}, {"user": "a"}, {"user": "a"}}, 30 * time.Second, 1, ratelimit.ActionAllow},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := ratelimittest.NewStore(nil)
			l := newLimiter(t, store, tt.rule)
			for _, id := range tt.ids {
				l.Check(ctx, id)
			}
			store.Clock().Advance(tt.advance)
			if got := store.RuleCount(l, tt.rule.Name, tt.ids[0]); got != tt.count {
				t.Fatalf("RuleCount = %g, want %g", got, tt.count)
			}
			if got := l.Peek(ctx, tt.ids[0]).Action; got != tt.last {
				t.Fatalf("peek after: %v, want %v", got, tt.last)
			}
		})
	}
}

func TestStoreKeysCallsAndClear(t *testing.T) {
	ctx := context.Background()
	store := ratelimittest.NewStore(nil)
	rule := ratelimit.Rule{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 1, Period: time.Minute}
	rule.BanFor = time.Hour
	l := newLimiter(t, store, rule)
	a, b := ratelimit.Identifier{"ip": "192.0.2.1"}, ratelimit.Identifier{"ip": "192.0.2.2"}
	l.Check(ctx, a)
	l.Check(ctx, a) // exceeds: banned for an hour
	l.Check(ctx, b)
	ka, _ := keys.Counter(ratelimit.DefaultKeyPrefix, "api", rule.Name, rule.Characteristics, "", a)
	kb, _ := keys.Counter(ratelimit.DefaultKeyPrefix, "api", rule.Name, rule.Characteristics, "", b)
	want := []string{ka, kb}
	slices.Sort(want)
	if got := store.Keys(); !slices.Equal(got, want) {
		t.Fatalf("Keys = %q, want %q", got, want)
	}
	if !store.RuleBanned(l, "per_ip", a) || store.RuleBanned(l, "per_ip", b) {
		t.Fatal("ban state")
	}
	if store.Calls() != 3 {
		t.Fatalf("Calls = %d, want 3", store.Calls())
	}
	// A rule the limiter does not have reads as nothing.
	if store.RuleCount(l, "nope", a) != 0 || store.RuleBanned(l, "nope", a) {
		t.Fatal("unknown rule")
	}
	// Clear goes through Delete: the ban and the counter are gone.
	if n, err := l.Clear(ctx, a); err != nil || n != 2 {
		t.Fatalf("Clear = %d, %v", n, err)
	}
	if store.RuleBanned(l, "per_ip", a) || store.RuleCount(l, "per_ip", a) != 0 {
		t.Fatal("Clear left state")
	}
	// Windows end: no key holds a count.
	store.Clock().Advance(time.Minute)
	if got := store.Keys(); len(got) != 0 {
		t.Fatalf("Keys after the window = %q", got)
	}
}

func TestStoreFailWith(t *testing.T) {
	ctx := context.Background()
	store := ratelimittest.NewStore(nil)
	l := newLimiter(t, store, ratelimit.Rule{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 1, Period: time.Minute})
	id := ratelimit.Identifier{"ip": "192.0.2.1"}
	down := errors.New("connection refused")
	store.FailWith(down)
	r := l.Check(ctx, id)
	if r.Action != ratelimit.ActionAllow || !errors.Is(r.Err, down) {
		t.Fatalf("failing store: %+v", r)
	}
	if _, err := l.Clear(ctx, id); !errors.Is(err, down) {
		t.Fatalf("Clear on a failing store: %v", err)
	}
	if store.RuleCount(l, "per_ip", id) != 0 {
		t.Fatal("a failed check counted")
	}
	store.FailWith(nil)
	l.Check(ctx, id)
	if r := l.Check(ctx, id); !r.Blocked() || r.Err != nil {
		t.Fatalf("restored store: %+v", r)
	}
}

// TestStoreIsInProcess: the store counts in this process, as the memory
// store does, so the limiter neither bounds its calls by Config.Timeout nor
// runs them in a guard goroutine: a loaded test machine (here, a timeout
// of a nanosecond) must not turn a block into a fail-open allow.
func TestStoreIsInProcess(t *testing.T) {
	store := ratelimittest.NewStore(nil)
	l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: store, Now: store.Clock().Now, Timeout: time.Nanosecond,
		Rules: []ratelimit.Rule{{Name: "per_user", Characteristics: []string{"user"}, Limit: 1, Period: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	id := ratelimit.Identifier{"user": "u"}
	for i := range 20 {
		r := l.Check(context.Background(), id)
		if r.Err != nil || r.Blocked() != (i > 0) {
			t.Fatalf("check %d: %+v, want the memory store's verdict", i, r)
		}
	}
	if n, err := l.Clear(context.Background(), id); err != nil || n != 1 {
		t.Fatalf("clear: %d, %v", n, err)
	}
}
