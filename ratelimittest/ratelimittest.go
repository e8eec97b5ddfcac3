package ratelimittest

import (
	"context"
	"math"
	"sort"
	"sync"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	ikeys "github.com/ratekit/ratekit/internal/keys"
)

// Clock is a clock that moves only when told to. It is safe for concurrent
// use; pass its Now method to ratelimit.Config.Now.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Start is the time a Clock made from the zero time starts at.
var Start = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// NewClock returns a clock showing start, or Start when start is zero.
func NewClock(start time.Time) *Clock {
	if start.IsZero() {
		start = Start
	}
	return &Clock{now: start}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (a negative d moves it back).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Store is a ratelimit.Store for tests: ratelimit's memory store on a Clock,
// which also records what it counted and can be told to fail. A Limiter
// calls it as it calls the memory store, in process: without Config.Timeout
// and without a guard goroutine, so that a slow test machine never fails a
// check open. Len and Close are the memory store's.
type Store struct {
	// The memory store, embedded so that its marker of a store in this
	// process is promoted to Store (the field's name, an alias's, stays
	// unexported).
	*memoryStore
	clock *Clock

	mu    sync.Mutex
	kinds map[string]ratelimit.Op // every key a check charged, with its last op's kind, limit, period and burst
	calls int
	err   error
}

type memoryStore = ratelimit.MemoryStore

var (
	_ ratelimit.Store      = (*Store)(nil)
	_ ratelimit.BatchStore = (*Store)(nil)
)

// NewStore returns an empty store on clock (a new Clock at Start when nil).
func NewStore(clock *Clock) *Store {
	if clock == nil {
		clock = NewClock(time.Time{})
	}
	return &Store{
		memoryStore: ratelimit.MemoryConfig{Now: clock.Now}.New(),
		clock:       clock,
		kinds:       map[string]ratelimit.Op{},
	}
}

// Clock returns the store's clock.
func (s *Store) Clock() *Clock { return s.clock }

// Eval implements ratelimit.Store.
func (s *Store) Eval(ctx context.Context, mode ratelimit.Mode, ops []ratelimit.Op) ([]ratelimit.OpResult, error) {
	if err := s.call(mode, ops); err != nil {
		return nil, err
	}
	return s.memoryStore.Eval(ctx, mode, ops)
}

// EvalBatch implements ratelimit.BatchStore: a whole batch is one call, as
// it is one round trip on Redis.
func (s *Store) EvalBatch(ctx context.Context, mode ratelimit.Mode, batch [][]ratelimit.Op) ([][]ratelimit.OpResult, error) {
	if err := s.call(mode, batch...); err != nil {
		return nil, err
	}
	return s.memoryStore.EvalBatch(ctx, mode, batch)
}

// call counts one store call and records the keys it charges, or returns
// the error the store was told to fail with.
func (s *Store) call(mode ratelimit.Mode, batch ...[]ratelimit.Op) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.err != nil {
		return s.err
	}
	if mode == ratelimit.ModeCheck {
		for _, ops := range batch {
			for _, op := range ops {
				if op.Cost > 0 {
					// What a count needs to be read again (a sliding window's
					// estimate and a bucket's tokens depend on them), not the
					// key strings the limiter lends.
					s.kinds[op.Key] = ratelimit.Op{Kind: op.Kind, Limit: op.Limit, Period: op.Period, Burst: op.Burst}
				}
			}
		}
	}
	return nil
}

// Delete implements ratelimit.Store (Limiter.Clear calls it).
func (s *Store) Delete(ctx context.Context, keys []string) (int, error) {
	s.mu.Lock()
	s.calls++
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return s.memoryStore.Delete(ctx, keys)
}

// FailWith makes every later call fail with err, as a Redis that is down
// would; FailWith(nil) restores the store. The limiter then fails open (and
// its breaker, unless disabled, stops calling the store for a while).
func (s *Store) FailWith(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// Calls returns how many Eval, EvalBatch and Delete calls reached the store,
// failed ones included: a test proves "no store work" by its not moving, and
// one round trip per batch by its moving by one.
func (s *Store) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Count returns the count under a counter key in its current window (the
// number of distinct values for a count_distinct rule); 0 once the window has
// ended or when nothing was counted.
func (s *Store) Count(key string) float64 {
	o := s.peek(key)
	return o.Count
}

// Banned reports whether the counter key's ban is active.
func (s *Store) Banned(key string) bool {
	return s.peek(key).Banned
}

func (s *Store) peek(key string) ratelimit.OpResult {
	s.mu.Lock()
	op := s.kinds[key]
	s.mu.Unlock()
	if op.Kind < ratelimit.OpSliding { // the count does not depend on them
		op.Limit, op.Period = math.MaxInt64, time.Nanosecond
	}
	op.Key, op.BanKey = key, ikeys.BanKey(key)
	out, err := s.memoryStore.Eval(context.Background(), ratelimit.ModePeek, []ratelimit.Op{op})
	if err != nil || len(out) == 0 {
		return ratelimit.OpResult{}
	}
	return out[0]
}

// RuleCount returns the count of limiter l's rule for id in its current
// window: Count of the rule's counter key. It is 0 for a rule l does not
// have, and for a rule that never counted id.
func (s *Store) RuleCount(l *ratelimit.Limiter, rule string, id ratelimit.Identifier) float64 {
	for _, r := range l.Rules() {
		if r.Name == rule {
			return s.Count(counterKey(l, &r, id))
		}
	}
	return 0
}

// RuleBanned reports whether limiter l's rule has an active ban for id.
func (s *Store) RuleBanned(l *ratelimit.Limiter, rule string, id ratelimit.Identifier) bool {
	for _, r := range l.Rules() {
		if r.Name == rule {
			return s.Banned(counterKey(l, &r, id))
		}
	}
	return false
}

// Keys returns the counter keys that hold a count now, sorted.
func (s *Store) Keys() []string {
	s.mu.Lock()
	keys := make([]string, 0, len(s.kinds))
	for k := range s.kinds {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	live := keys[:0]
	for _, k := range keys {
		if s.Count(k) > 0 {
			live = append(live, k)
		}
	}
	sort.Strings(live)
	return live
}

// counterKey returns the key limiter l counts rule r under for id.
func counterKey(l *ratelimit.Limiter, r *ratelimit.Rule, id ratelimit.Identifier) string {
	k, _ := ikeys.Counter(l.KeyPrefix(), l.Name(), r.Name, r.Characteristics, ikeys.Suffix(r.CountDistinct != "", string(r.Algorithm)), id)
	return k
}
