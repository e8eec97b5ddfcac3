package ratelimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
)

// countingStore counts the Eval calls that reach a real store and keeps the
// keys of the last one, to prove which checks the blocked cache answers alone.
type countingStore struct {
	ratelimit.Store
	evals atomic.Int64
	mu    sync.Mutex
	last  []string
}

func (s *countingStore) Eval(ctx context.Context, m ratelimit.Mode, ops []ratelimit.Op) ([]ratelimit.OpResult, error) {
	s.evals.Add(1)
	keys := make([]string, len(ops))
	for i := range ops {
		keys[i] = ops[i].Key
	}
	s.mu.Lock()
	s.last = keys
	s.mu.Unlock()
	return s.Store.Eval(ctx, m, ops)
}

func (s *countingStore) lastKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func (s *countingStore) ContextBounded() bool {
	cb, ok := s.Store.(interface{ ContextBounded() bool })
	return ok && cb.ContextBounded()
}

// fakeClock is the limiter's clock (and the memory store's): the blocked cache
// expires by it, so a test moves past a reset without waiting.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// cacheStores returns the real stores the blocked-cache tests run on: the
// memory store, and the Redis store (from New on go-redis and from Dial) on
// the standalone server and the cluster when their variables are set.
func cacheStores(t *testing.T, clk *fakeClock) map[string]func(t *testing.T) (ratelimit.Store, string) {
	return map[string]func(t *testing.T) (ratelimit.Store, string){
		"memory": func(t *testing.T) (ratelimit.Store, string) {
			return ratelimit.MemoryConfig{Now: clk.Now}.New(), ""
		},
		"redis": func(t *testing.T) (ratelimit.Store, string) {
			return redisstore.New(redistest.Client(t)), redistest.Prefix(t)
		},
		"cluster": func(t *testing.T) (ratelimit.Store, string) {
			return redisstore.New(redistest.ClusterClient(t)), redistest.Prefix(t)
		},
		"dial": func(t *testing.T) (ratelimit.Store, string) {
			return dialStore(t, redistest.URL(t)), redistest.Prefix(t)
		},
		"dial_cluster": func(t *testing.T) (ratelimit.Store, string) {
			return dialStore(t, redistest.ClusterURL(t)), redistest.Prefix(t)
		},
	}
}

// dialStore returns a connected Store from redisstore.Open on url, closed at
// cleanup.
func dialStore(t *testing.T, url string) *redisstore.Store {
	t.Helper()
	o, err := redisstore.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	s, err := redisstore.Open(context.Background(), redisstore.Options{Client: o, RequireConnection: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func bannedRule() ratelimit.Rule {
	r := basic("login")
	r.Limit = 2
	r.BanFor = 10 * time.Minute
	return r
}

func cacheLimiter(t *testing.T, store ratelimit.Store, prefix string, clk *fakeClock, cfg ratelimit.BlockedCacheConfig, rules ...ratelimit.Rule) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{Name: "cache", Store: store, KeyPrefix: prefix, Rules: rules,
		Now: clk.Now, BlockedCache: cfg, Logger: slog.New(slog.DiscardHandler), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestBlockedCacheBannedClient: once a check finds the ban, a hammering
// client makes no store call until the ban ends, with the same result the
// store gave; a local Clear lifts it and SetRules drops the cache.
func TestBlockedCacheBannedClient(t *testing.T) {
	for name := range cacheStores(t, &fakeClock{}) {
		t.Run(name, func(t *testing.T) {
			clk := &fakeClock{t: time.Now()}
			store, prefix := cacheStores(t, clk)[name](t)
			cs := &countingStore{Store: store}
			l := cacheLimiter(t, cs, prefix, clk, ratelimit.BlockedCacheConfig{MaxAge: -1}, bannedRule())
			ctx := context.Background()
			id := ratelimit.Identifier{"user": "mallory"}
			for i := range 2 {
				if r := l.Check(ctx, id); r.Blocked() || r.Err != nil {
					t.Fatalf("check %d: %+v", i, r)
				}
			}
			first := l.Check(ctx, id)
			if !first.Blocked() || !first.Banned() || first.Err != nil {
				t.Fatalf("third check: want a banned block, got %+v", first)
			}
			if got := cs.evals.Load(); got != 3 {
				t.Fatalf("store calls after 3 checks = %d, want 3", got)
			}
			for i := range 100 {
				clk.Add(100 * time.Millisecond) // within the window: the count stays the store's
				r := l.Check(ctx, id)
				if !r.Blocked() || !r.Banned() || r.Err != nil || !r.Exceeded {
					t.Fatalf("hammering check %d: want a banned block, got %+v", i, r)
				}
				if r.RuleName() != "login" || r.Limit() != 2 || r.Info.Period != time.Minute || !r.ResetAt().Equal(first.ResetAt()) ||
					r.Count() != first.Count() || len(r.Evaluations) != 1 || !r.Evaluations[0].Blocked {
					t.Fatalf("cached result %+v (info %+v) differs from the store's %+v (info %+v)", r, r.Info, first, first.Info)
				}
				if p := l.Peek(ctx, id); !p.Blocked() || !p.Banned() {
					t.Fatalf("peek while banned: %+v", p)
				}
			}
			if got := cs.evals.Load(); got != 3 {
				t.Fatalf("store calls while banned = %d, want still 3", got)
			}

			l2 := cacheLimiter(t, cs, prefix, clk, ratelimit.BlockedCacheConfig{}, bannedRule())
			if r := l2.Check(ctx, id); !r.Blocked() || !r.Banned() {
				t.Fatalf("another limiter on the same store: %+v", r)
			}
			if got := cs.evals.Load(); got != 4 {
				t.Fatalf("another limiter's cache is its own: store calls %d, want 4", got)
			}

			if err := l.SetRules([]ratelimit.Rule{bannedRule()}); err != nil {
				t.Fatal(err)
			}
			if r := l.Check(ctx, id); !r.Blocked() || !r.Banned() {
				t.Fatalf("after SetRules: %+v", r)
			}
			if got := cs.evals.Load(); got != 5 {
				t.Fatalf("after SetRules the store answers: calls %d, want 5", got)
			}
			l.Check(ctx, id) // cached again
			if got := cs.evals.Load(); got != 5 {
				t.Fatalf("refilled cache: calls %d, want 5", got)
			}

			if _, err := l.Clear(ctx, id); err != nil {
				t.Fatal(err)
			}
			if r := l.Check(ctx, id); r.Blocked() || r.Banned() || r.Err != nil {
				t.Fatalf("after Clear: want allowed, got %+v", r)
			}
			if got := cs.evals.Load(); got != 6 {
				t.Fatalf("after Clear the store answers: calls %d, want 6", got)
			}
		})
	}
}

// TestBlockedCacheExpires: past the cached reset the store is asked again.
func TestBlockedCacheExpires(t *testing.T) {
	clk := &fakeClock{t: time.Now()}
	cs := &countingStore{Store: ratelimit.MemoryConfig{Now: clk.Now}.New()}
	l := cacheLimiter(t, cs, "", clk, ratelimit.BlockedCacheConfig{MaxAge: -1}, bannedRule())
	ctx := context.Background()
	id := ratelimit.Identifier{"user": "mallory"}
	var banned ratelimit.Result
	for range 3 {
		banned = l.Check(ctx, id)
	}
	if !banned.Banned() {
		t.Fatalf("want banned, got %+v", banned)
	}
	clk.Add(10*time.Minute - time.Second)
	if r := l.Check(ctx, id); !r.Banned() || cs.evals.Load() != 3 {
		t.Fatalf("before the ban ends: %+v after %d store calls, want banned after 3", r, cs.evals.Load())
	}
	clk.Add(2 * time.Second)
	r := l.Check(ctx, id)
	if r.Banned() || cs.evals.Load() != 4 {
		t.Fatalf("after the ban ends: %+v after %d store calls, want the store's answer (4 calls)", r, cs.evals.Load())
	}
}

// TestBlockedCacheMaxAge: by default an entry answers for a second, so that a
// Clear by another limiter (another process) is seen that much later.
func TestBlockedCacheMaxAge(t *testing.T) {
	clk := &fakeClock{t: time.Now()}
	store := ratelimit.MemoryConfig{Now: clk.Now}.New()
	cs := &countingStore{Store: store}
	l := cacheLimiter(t, cs, "", clk, ratelimit.BlockedCacheConfig{}, bannedRule())
	other := cacheLimiter(t, store, "", clk, ratelimit.BlockedCacheConfig{}, bannedRule())
	ctx := context.Background()
	id := ratelimit.Identifier{"user": "mallory"}
	for range 3 {
		l.Check(ctx, id)
	}
	clk.Add(900 * time.Millisecond)
	if r := l.Check(ctx, id); !r.Banned() || cs.evals.Load() != 3 {
		t.Fatalf("within MaxAge: %+v after %d store calls, want banned after 3", r, cs.evals.Load())
	}
	clk.Add(200 * time.Millisecond)
	if r := l.Check(ctx, id); !r.Banned() || cs.evals.Load() != 4 {
		t.Fatalf("past MaxAge: %+v after %d store calls, want banned by the store (4 calls)", r, cs.evals.Load())
	}
	if _, err := other.Clear(ctx, id); err != nil {
		t.Fatal(err)
	}
	if r := l.Check(ctx, id); !r.Banned() || cs.evals.Load() != 4 {
		t.Fatalf("another limiter's Clear, within MaxAge: %+v after %d store calls, want the cached ban", r, cs.evals.Load())
	}
	clk.Add(time.Second)
	if r := l.Check(ctx, id); r.Blocked() || cs.evals.Load() != 5 {
		t.Fatalf("another limiter's Clear, past MaxAge: %+v after %d store calls, want allowed by the store", r, cs.evals.Load())
	}
}

// TestBlockedCacheEarlierRulesStillCount: rules before the cached one go to the
// store; the cached rule is reported blocked without being sent or charged.
func TestBlockedCacheEarlierRulesStillCount(t *testing.T) {
	for name := range cacheStores(t, &fakeClock{}) {
		t.Run(name, func(t *testing.T) {
			clk := &fakeClock{t: time.Now()}
			store, prefix := cacheStores(t, clk)[name](t)
			cs := &countingStore{Store: store}
			audit := basic("audit")
			audit.Action = ratelimit.ActionLog
			audit.Limit = 1000
			l := cacheLimiter(t, cs, prefix, clk, ratelimit.BlockedCacheConfig{}, audit, bannedRule())
			ctx := context.Background()
			id := ratelimit.Identifier{"user": "mallory"}
			for range 3 {
				l.Check(ctx, id)
			}
			keys := l.Keys(id) // audit, audit ban, login, login ban
			for i := range 5 {
				r := l.Check(ctx, id)
				if !r.Blocked() || !r.Banned() || r.RuleName() != "login" || len(r.Evaluations) != 2 {
					t.Fatalf("check %d: %+v", i, r)
				}
				if ev := r.Evaluations[0]; ev.Rule.Name != "audit" || ev.Exceeded || ev.Info.Count != float64(4+i) {
					t.Fatalf("check %d: the log rule's evaluation %+v, want counted %d", i, ev, 4+i)
				}
				if got := cs.lastKeys(); len(got) != 1 || got[0] != keys[0] {
					t.Fatalf("check %d sent %q, want only the log rule's counter %q", i, got, keys[0])
				}
			}
			if got := cs.evals.Load(); got != 8 {
				t.Fatalf("store calls = %d, want 8 (one per check, for the log rule)", got)
			}
			// The banned counter was not charged by the cached checks.
			cache := cacheLimiter(t, store, prefix, clk, ratelimit.BlockedCacheConfig{Size: -1}, audit, bannedRule())
			if r := cache.Peek(ctx, id); len(r.Evaluations) != 2 || r.Evaluations[1].Info.Count != 3 {
				t.Fatalf("login counter after cached checks: %+v, want count 3", r.Evaluations)
			}
		})
	}
}

// TestBlockedCacheOverLimit: a plain over-limit counter is cached only when
// OverLimit is set; a raised limit is asked again.
func TestBlockedCacheOverLimit(t *testing.T) {
	tests := []struct {
		name      string
		cfg       ratelimit.BlockedCacheConfig
		wantEvals int64
	}{
		{"default", ratelimit.BlockedCacheConfig{}, 10},
		{"over limit", ratelimit.BlockedCacheConfig{OverLimit: true}, 6},
		{"disabled", ratelimit.BlockedCacheConfig{Size: -1, OverLimit: true}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Now()}
			cs := &countingStore{Store: ratelimit.MemoryConfig{Now: clk.Now}.New()}
			l := cacheLimiter(t, cs, "", clk, tt.cfg, basic("api")) // limit 5 a minute
			ctx := context.Background()
			id := ratelimit.Identifier{"user": "u"}
			var first ratelimit.Result
			for i := range 10 {
				r := l.Check(ctx, id)
				if r.Blocked() != (i >= 5) || r.Banned() {
					t.Fatalf("check %d: %+v", i, r)
				}
				if i == 5 {
					first = r
				}
				if i > 5 && (!r.ResetAt().Equal(first.ResetAt()) || r.Limit() != 5) {
					t.Fatalf("check %d: %+v, want as the first block %+v", i, r.Info, first.Info)
				}
			}
			if got := cs.evals.Load(); got != tt.wantEvals {
				t.Fatalf("store calls = %d, want %d", got, tt.wantEvals)
			}
			if l.BlockedCacheLen() > 1 {
				t.Fatalf("cache entries %d", l.BlockedCacheLen())
			}
		})
	}
}

// TestBlockedCacheBounded: many banned clients never grow the cache past its
// size, and every one is still blocked (by the cache or by the store).
func TestBlockedCacheBounded(t *testing.T) {
	clk := &fakeClock{t: time.Now()}
	cs := &countingStore{Store: ratelimit.MemoryConfig{Now: clk.Now}.New()}
	l := cacheLimiter(t, cs, "", clk, ratelimit.BlockedCacheConfig{Size: 32}, bannedRule())
	ctx := context.Background()
	for i := range 500 {
		id := ratelimit.Identifier{"user": fmt.Sprint("u", i)}
		for range 3 {
			l.Check(ctx, id)
		}
		if n := l.BlockedCacheLen(); n > 32 {
			t.Fatalf("after %d banned clients the cache holds %d entries, cap 32", i+1, n)
		}
	}
	if n := l.BlockedCacheLen(); n < 16 {
		t.Fatalf("cache holds %d entries, want it in use", n)
	}
	for i := range 500 {
		if r := l.Check(ctx, ratelimit.Identifier{"user": fmt.Sprint("u", i)}); !r.Blocked() || !r.Banned() {
			t.Fatalf("client %d: %+v", i, r)
		}
	}
}

// TestBlockedCacheLargeSize: a Size near the largest int caps the cache
// there: rounding it up to whole shards overflowed, and the cache held 16
// entries (one per shard) instead.
func TestBlockedCacheLargeSize(t *testing.T) {
	clk := &fakeClock{t: time.Now()}
	store := ratelimit.MemoryConfig{Now: clk.Now}.New()
	for _, size := range []int{math.MaxInt, math.MaxInt - 15} {
		l := cacheLimiter(t, store, "", clk, ratelimit.BlockedCacheConfig{Size: size}, bannedRule())
		ctx := context.Background()
		const clients = 200
		for i := range clients {
			id := ratelimit.Identifier{"user": fmt.Sprint("u", i)}
			for range 3 {
				l.Check(ctx, id)
			}
		}
		if n := l.BlockedCacheLen(); n != clients {
			t.Fatalf("Size %d: the cache holds %d of %d banned clients", size, n, clients)
		}
	}
}

// TestBlockedCacheShadow: a cached block is softened like a store-answered one.
func TestBlockedCacheShadow(t *testing.T) {
	clk := &fakeClock{t: time.Now()}
	cs := &countingStore{Store: ratelimit.MemoryConfig{Now: clk.Now}.New()}
	l := cacheLimiter(t, cs, "", clk, ratelimit.BlockedCacheConfig{}, bannedRule())
	if err := l.SetEnforcement(ratelimit.Shadow); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := ratelimit.Identifier{"user": "u"}
	for range 5 {
		l.Check(ctx, id)
	}
	r := l.Check(ctx, id)
	if r.Blocked() || !r.Shadow || !r.WouldBlock() || !r.Banned() || cs.evals.Load() != 3 {
		t.Fatalf("shadowed cached block: %+v after %d store calls", r, cs.evals.Load())
	}
}

// Compile-time check that the wrapper still is a store.
var _ ratelimit.Store = (*countingStore)(nil)

// TestBlockedCacheOneRefreshPerMaxAge: when an entry ages out, one check asks
// the store while the others keep the cached answer; a lift seen by that one
// check ends the cached answers of all.
func TestBlockedCacheOneRefreshPerMaxAge(t *testing.T) {
	clk := &fakeClock{t: time.Now()}
	store := ratelimit.MemoryConfig{Now: clk.Now}.New()
	cs := &countingStore{Store: store}
	l := cacheLimiter(t, cs, "", clk, ratelimit.BlockedCacheConfig{}, bannedRule())
	ctx := context.Background()
	id := ratelimit.Identifier{"user": "mallory"}
	for range 3 {
		l.Check(ctx, id)
	}
	clk.Add(1100 * time.Millisecond)
	// The first check after MaxAge claims the refresh and refills the entry.
	if r := l.Check(ctx, id); !r.Banned() || cs.evals.Load() != 4 {
		t.Fatalf("refresh: %+v after %d store calls, want banned by the store (4 calls)", r, cs.evals.Load())
	}
	var wg sync.WaitGroup
	clk.Add(1100 * time.Millisecond)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := l.Check(ctx, id); !r.Banned() {
				t.Errorf("concurrent check: %+v", r)
			}
		}()
	}
	wg.Wait()
	if got := cs.evals.Load(); got != 5 {
		t.Fatalf("50 concurrent checks after MaxAge made %d store calls, want 1", got-4)
	}
	other := cacheLimiter(t, store, "", clk, ratelimit.BlockedCacheConfig{}, bannedRule())
	if _, err := other.Clear(ctx, id); err != nil {
		t.Fatal(err)
	}
	clk.Add(1100 * time.Millisecond)
	if r := l.Check(ctx, id); r.Blocked() {
		t.Fatalf("after the lift and MaxAge: %+v", r)
	}
	if n := l.BlockedCacheLen(); n != 0 {
		t.Fatalf("the lifted entry is still cached (%d entries)", n)
	}
}

// A login limiter that bans an address for 15 minutes after 3 attempts a
// minute: once banned, its checks are answered in process, and another
// process's Clear is seen within 5 seconds.
func ExampleBlockedCacheConfig() {
	l, err := ratelimit.New(ratelimit.Config{
		Name:  "login",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "per_ip", Action: ratelimit.ActionLimit, Characteristics: []string{"ip"},
			Limit: 3, Period: time.Minute, BanFor: 15 * time.Minute}},
		BlockedCache: ratelimit.BlockedCacheConfig{Size: 50000, MaxAge: 5 * time.Second},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	id := ratelimit.Identifier{"ip": "192.0.2.7"}
	for range 4 {
		l.Check(ctx, id) // the fourth attempt starts the ban
	}
	r := l.Check(ctx, id) // answered from the cache
	fmt.Println(r.Blocked(), r.Banned(), l.BlockedCacheLen())
	// Output: true true 1
}

// TestBlockedCacheOverLimitSmallerCost: a sliding window or a token bucket
// rejects a check by its cost and is not charged for it, so the cached block
// of a costly check says nothing of a cheaper one, which the store admits.
// A fixed window is charged even when over: it blocks every cost.
func TestBlockedCacheOverLimitSmallerCost(t *testing.T) {
	tests := []struct {
		algorithm ratelimit.Algorithm
		wantCheap ratelimit.Verdict // a check of cost 1 after the costly block
	}{
		{ratelimit.FixedWindow, ratelimit.ActionBlock},
		{ratelimit.SlidingWindow, ratelimit.ActionAllow},
		{ratelimit.TokenBucket, ratelimit.ActionAllow},
	}
	for _, tt := range tests {
		t.Run(string(tt.algorithm), func(t *testing.T) {
			clk := &fakeClock{t: time.Now()}
			r := basic("api") // limit 5 a minute
			r.Algorithm = tt.algorithm
			l := cacheLimiter(t, ratelimit.MemoryConfig{Now: clk.Now}.New(), "", clk,
				ratelimit.BlockedCacheConfig{OverLimit: true, MaxAge: -1}, r)
			ctx := context.Background()
			id := ratelimit.Identifier{"user": "u"}
			if res := l.Check(ctx, id, ratelimit.Cost(3)); res.Blocked() {
				t.Fatalf("cost 3 of 5: %+v", res)
			}
			if res := l.Check(ctx, id, ratelimit.Cost(3)); !res.Blocked() {
				t.Fatalf("cost 3 more: %+v, want a block", res)
			}
			if res := l.Check(ctx, id); res.Action != tt.wantCheap {
				t.Fatalf("cost 1 after the block: %s (%+v), want %s", res.Action, res.Info, tt.wantCheap)
			}
		})
	}
}

// TestBlockedCacheBannedCountUntilEnded: a cached ban reports the count the
// store last gave, and 0 only once the counter has certainly emptied, which
// for a sliding window (its count weighs the previous window) and a token
// bucket (its burst comes back at limit a period) takes longer than one
// period: the cache must never report 0 where the store still counts.
func TestBlockedCacheBannedCountUntilEnded(t *testing.T) {
	for _, alg := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
			store := ratelimit.MemoryConfig{Now: clk.Now}.New()
			defer store.Close()
			r := bannedRule() // 2 a minute, a ban of 10 minutes
			r.Algorithm, r.Burst = alg, 6
			if alg != ratelimit.TokenBucket {
				r.Burst = 0
			}
			cs := &countingStore{Store: store}
			cached := cacheLimiter(t, cs, "", clk, ratelimit.BlockedCacheConfig{MaxAge: -1}, r)
			plain := cacheLimiter(t, store, "", clk, ratelimit.BlockedCacheConfig{Size: -1}, r)
			ctx := context.Background()
			id := ratelimit.Identifier{"user": "u"}
			for range 7 { // the last one at least is over the limit or the burst: banned
				cached.Check(ctx, id)
			}
			evals := cs.evals.Load()
			for step := range 20 { // 30s each: past every counter's end, within the ban
				got, want := cached.Check(ctx, id), plain.Peek(ctx, id)
				if !got.Banned() || !want.Banned() {
					t.Fatalf("after %ds: cached %+v, store %+v: want both banned", 30*step, got, want)
				}
				if got.Info.Count == 0 && want.Info.Count != 0 {
					t.Fatalf("after %ds: the cached ban reports count 0, the store %v", 30*step, want.Info.Count)
				}
				if step >= 6 && got.Info.Count != 0 { // 3 minutes: every counter here has emptied
					t.Fatalf("after %ds: the cached ban reports count %v, want 0", 30*step, got.Info.Count)
				}
				clk.Add(30 * time.Second)
			}
			if n := cs.evals.Load() - evals; n != 0 {
				t.Fatalf("the banned checks made %d store calls, want none: the cache must answer them", n)
			}
		})
	}
}
