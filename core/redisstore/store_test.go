package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	ikeys "github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/redistest"
)

// keyer makes counter keys unique to a test; each name is its own hash tag,
// so on a cluster different names usually land in different slots.
type keyer string

func newKeyer(t testing.TB) keyer { return keyer(redistest.Prefix(t)) }

func (k keyer) key(name string) string { return string(k) + "{" + string(k) + name + "}" }
func (k keyer) ban(name string) string { return ikeys.BanKey(k.key(name)) }

// count returns a counter op on name with the given limit and cost.
func (k keyer) count(name string, limit int64, cost float64) ratelimit.Op {
	return ratelimit.Op{Kind: ratelimit.OpCount, Key: k.key(name), Limit: limit, Cost: cost, Period: time.Minute}
}

func (k keyer) distinct(name, member string, limit int64) ratelimit.Op {
	return ratelimit.Op{Kind: ratelimit.OpDistinct, Key: k.key(name), Member: member, Limit: limit, Cost: 1, Period: time.Minute}
}

func terminal(op ratelimit.Op) ratelimit.Op { op.Terminal = true; return op }

func banned(op ratelimit.Op, d time.Duration) ratelimit.Op {
	op.BanKey, op.BanFor = ikeys.BanKey(op.Key), d
	return op
}

func eval(t testing.TB, s *Store, mode ratelimit.Mode, ops ...ratelimit.Op) []ratelimit.OpResult {
	t.Helper()
	out, err := s.Eval(ctx, mode, ops)
	if err != nil {
		t.Fatalf("eval %s: %v", mode, err)
	}
	if len(out) != len(ops) {
		t.Fatalf("%d outcomes for %d ops", len(out), len(ops))
	}
	return out
}

// want is an expected outcome; ttl is checked from ttlSlack below it up to it.
//
// ttlSlack leaves room for a loaded machine between a write and its check; the
// upper bound stays exact (a window is never extended).
func ttlSlack(ttl time.Duration) time.Duration { return max(2*time.Second, ttl/10) }

type want struct {
	evaluated, exceeded, banned bool
	count                       float64
	ttl                         time.Duration
}

func ok(count float64, ttl time.Duration) want { return want{evaluated: true, count: count, ttl: ttl} }
func over(count float64, ttl time.Duration) want {
	return want{evaluated: true, exceeded: true, count: count, ttl: ttl}
}
func ban(count float64, ttl time.Duration) want {
	return want{evaluated: true, exceeded: true, banned: true, count: count, ttl: ttl}
}

var skipped = want{}

func expectOutcomes(t testing.TB, step string, got []ratelimit.OpResult, ws ...want) {
	t.Helper()
	for i, w := range ws {
		g := got[i]
		if g.Evaluated != w.evaluated || g.Exceeded != w.exceeded || g.Banned != w.banned || g.Count != w.count ||
			g.TTL > w.ttl || g.TTL < w.ttl-ttlSlack(w.ttl) {
			t.Errorf("%s: op %d = %+v, want %+v", step, i, g, w)
		}
	}
}

func pttl(t testing.TB, c redis.UniversalClient, key string) time.Duration {
	t.Helper()
	d, err := c.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func exists(t testing.TB, c redis.UniversalClient, key string) bool {
	t.Helper()
	n, err := c.Exists(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

const (
	check = ratelimit.ModeCheck
	peek  = ratelimit.ModePeek
)

func TestCounter(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		op := k.count("a", 2, 1)
		expectOutcomes(t, "peek missing", eval(t, s, peek, op), ok(0, time.Minute))
		expectOutcomes(t, "1", eval(t, s, check, op), ok(1, time.Minute))
		expectOutcomes(t, "2", eval(t, s, check, op), ok(2, time.Minute))
		expectOutcomes(t, "3", eval(t, s, check, op), over(3, time.Minute))
		if d := pttl(t, c, op.Key); d > time.Minute || d < time.Minute-time.Second {
			t.Fatalf("window PTTL = %v, want about a minute", d)
		}
		if v := c.Get(ctx, op.Key).Val(); v != "3" {
			t.Fatalf("counter = %q, want 3", v)
		}
	})
}

func TestFractionalCost(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		expectOutcomes(t, "0.25", eval(t, s, check, k.count("a", 1, 0.25)), ok(0.25, time.Minute))
		expectOutcomes(t, "+0.5", eval(t, s, check, k.count("a", 1, 0.5)), ok(0.75, time.Minute))
		expectOutcomes(t, "peek +0.5", eval(t, s, peek, k.count("a", 1, 0.5)), over(0.75, time.Minute))
		expectOutcomes(t, "peek +0.25", eval(t, s, peek, k.count("a", 1, 0.25)), ok(0.75, time.Minute))
		if v := c.Get(ctx, k.key("a")).Val(); v != "0.75" {
			t.Fatalf("counter = %q, want 0.75", v)
		}
		expectOutcomes(t, "tiny", eval(t, s, check, k.count("b", 1, 1e-9)), ok(1e-9, time.Minute))
	})
}

func TestCostZeroWritesNothing(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		ops := []ratelimit.Op{banned(k.count("a", 1, 0), time.Hour), k.distinct("d", "m", 1)}
		ops[1].Cost = 0
		expectOutcomes(t, "missing", eval(t, s, check, ops...), ok(0, time.Minute), ok(0, time.Minute))
		if keys := keysUnder(t, c, string(k)); len(keys) != 0 {
			t.Fatalf("cost 0 created %v", keys)
		}
		eval(t, s, check, k.count("a", 1, 1))
		c.PExpire(ctx, k.key("a"), 30*time.Second)
		expectOutcomes(t, "at limit", eval(t, s, check, ops[0]), ok(1, 30*time.Second))
		eval(t, s, check, k.count("a", 1, 1))
		expectOutcomes(t, "over: count > limit, nothing added", eval(t, s, check, ops[0]), over(2, 30*time.Second))
		if v := c.Get(ctx, k.key("a")).Val(); v != "2" || exists(t, c, k.ban("a")) {
			t.Fatalf("counter = %q, ban %v: cost 0 must not write", v, exists(t, c, k.ban("a")))
		}
	})
}

func TestDistinct(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		d := func(m string) ratelimit.Op { return k.distinct("ips", m, 2) }
		expectOutcomes(t, "peek new on missing", eval(t, s, peek, d("a")), ok(0, time.Minute))
		expectOutcomes(t, "a", eval(t, s, check, d("a")), ok(1, time.Minute))
		expectOutcomes(t, "a again", eval(t, s, check, d("a")), ok(1, time.Minute))
		expectOutcomes(t, "b", eval(t, s, check, d("b")), ok(2, time.Minute))
		expectOutcomes(t, "peek known", eval(t, s, peek, d("a")), ok(2, time.Minute))
		expectOutcomes(t, "peek new", eval(t, s, peek, d("c")), over(2, time.Minute))
		p := d("c")
		p.Cost = 0
		expectOutcomes(t, "peek new, cost 0", eval(t, s, peek, p), ok(2, time.Minute))
		expectOutcomes(t, "c", eval(t, s, check, d("c")), over(3, time.Minute))
		members, _ := c.SMembers(ctx, k.key("ips")).Result()
		slices.Sort(members)
		if fmt.Sprint(members) != "[a b c]" {
			t.Fatalf("members = %v", members)
		}
	})
}

func TestBanOutlivesWindow(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		op := terminal(banned(k.count("login", 1, 1), 10*time.Minute))
		expectOutcomes(t, "1", eval(t, s, check, op), ok(1, time.Minute))
		expectOutcomes(t, "2 starts the ban", eval(t, s, check, op), ban(2, 10*time.Minute))
		expectOutcomes(t, "banned: not counted", eval(t, s, check, op), ban(2, 10*time.Minute))
		expectOutcomes(t, "peek banned", eval(t, s, peek, op), ban(2, 10*time.Minute))
		if d := pttl(t, c, op.BanKey); d > 10*time.Minute || d < 10*time.Minute-time.Second {
			t.Fatalf("ban PTTL = %v", d)
		}
		c.Del(ctx, op.Key) // the window ends; the ban does not
		c.PExpire(ctx, op.BanKey, 5*time.Minute)
		expectOutcomes(t, "window over, still banned", eval(t, s, check, op), ban(0, 5*time.Minute))
		if exists(t, c, op.Key) {
			t.Fatal("a banned check created the counter")
		}
		c.Del(ctx, op.BanKey)
		expectOutcomes(t, "ban over", eval(t, s, check, op), ok(1, time.Minute))
	})
}

func TestShadowBanContinues(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		ops := []ratelimit.Op{banned(k.count("shadow", 0, 1), time.Hour), terminal(k.count("enforced", 5, 1))}
		expectOutcomes(t, "shadow ban starts", eval(t, s, check, ops...), ban(1, time.Hour), ok(1, time.Minute))
		expectOutcomes(t, "shadow banned", eval(t, s, check, ops...), ban(1, time.Hour), ok(2, time.Minute))
	})
}

func TestWindowNeverExtended(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		for _, op := range []ratelimit.Op{k.count("a", 10, 1), k.distinct("d", "x", 10)} {
			eval(t, s, check, op)
			c.PExpire(ctx, op.Key, 5*time.Second) // as if 55s had passed
			s.forgetWindows()
			op.Member = "y"
			out := eval(t, s, check, op)
			if out[0].TTL > 5*time.Second || pttl(t, c, op.Key) > 5*time.Second {
				t.Fatalf("%s: window extended: outcome TTL %v, PTTL %v", op.Key, out[0].TTL, pttl(t, c, op.Key))
			}
			// A key without TTL gets one at the next write (from a Store from
			// Dial, once the window it remembers has ended: forgetWindows).
			c.Persist(ctx, op.Key)
			s.forgetWindows()
			op.Member = "z"
			expectOutcomes(t, "self-heal", eval(t, s, check, op), ok(3, time.Minute))
			if d := pttl(t, c, op.Key); d < time.Minute-time.Second {
				t.Fatalf("%s: PTTL %v after self-heal", op.Key, d)
			}
		}
	})
}

func TestTerminalStopsEvaluation(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		ops := []ratelimit.Op{
			k.count("log", 0, 1), // exceeded, not terminal: evaluation goes on
			terminal(k.count("limit", 0, 1)),
			k.count("after", 10, 1),
			banned(k.count("after_ban", 0, 1), time.Hour),
			k.distinct("after_set", "m", 10),
		}
		expectOutcomes(t, "block", eval(t, s, check, ops...), over(1, time.Minute), over(1, time.Minute), skipped, skipped, skipped)
		for _, key := range []string{k.key("after"), k.key("after_ban"), k.ban("after_ban"), k.key("after_set")} {
			if exists(t, c, key) {
				t.Errorf("%s written after the block", key)
			}
		}
		expectOutcomes(t, "peek", eval(t, s, peek, ops...), over(1, time.Minute), over(1, time.Minute), skipped, skipped, skipped)
	})
}

// TestPeekNeverMutates compares every key's DUMP and PTTL around peeks.
func TestPeekNeverMutates(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		eval(t, s, check, k.count("a", 1, 2.5), k.distinct("d", "x", 1), banned(k.count("b", 0, 1), time.Hour))
		snapshot := func() map[string]string {
			m := map[string]string{}
			for _, key := range keysUnder(t, c, string(k)) {
				m[key] = c.Dump(ctx, key).Val()
			}
			return m
		}
		before := snapshot()
		ttls := map[string]time.Duration{}
		for key := range before {
			ttls[key] = pttl(t, c, key)
		}
		if len(before) != 4 {
			t.Fatalf("setup keys = %v", before)
		}
		for _, ops := range [][]ratelimit.Op{
			{k.count("a", 1, 1), k.count("missing", 0, 5), k.distinct("d", "new", 1), k.distinct("d2", "new", 0)},
			{terminal(banned(k.count("b", 0, 1), time.Hour)), k.count("a", 100, 1)},
			{terminal(banned(k.count("a", 100, 1), time.Hour)), banned(k.count("c", 0, 1), time.Hour)},
		} {
			eval(t, s, peek, ops...)
		}
		after := snapshot()
		if fmt.Sprint(before) != fmt.Sprint(after) {
			t.Fatalf("peek changed keys:\nbefore %q\nafter  %q", before, after)
		}
		for key, d := range ttls {
			if got := pttl(t, c, key); got > d {
				t.Fatalf("peek extended %s: %v > %v", key, got, d)
			}
		}
	})
}

// TestConcurrentAdmission runs 64 goroutines against a limit of 50: exactly 50
// checks pass. On a cluster the second op lives in another slot, so the
// compensation of the blocking path is exercised under contention too.
func TestConcurrentAdmission(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) { concurrentAdmission(t, s, c) })
}

// concurrentAdmission is TestConcurrentAdmission on s, whose keys c reads.
func concurrentAdmission(t *testing.T, s *Store, c redis.UniversalClient) {
	{
		k := newKeyer(t)
		const limit, workers, each = 50, 64, 3
		ops := []ratelimit.Op{k.count("before", 1e6, 1), terminal(k.count("limit", limit, 1)), k.count("after", 1e6, 1)}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range each {
					out, err := s.Eval(ctx, check, ops)
					if err != nil {
						t.Error(err)
						return
					}
					if !out[1].Exceeded {
						allowed.Add(1)
						if !out[2].Evaluated {
							t.Error("allowed check did not evaluate the last op")
						}
					} else if out[2].Evaluated {
						t.Error("blocked check evaluated the op after the block")
					}
				}
			})
		}
		wg.Wait()
		if allowed.Load() != limit {
			t.Fatalf("allowed %d, want exactly %d", allowed.Load(), limit)
		}
		for name, want := range map[string]string{"before": fmt.Sprint(workers * each), "limit": fmt.Sprint(workers * each), "after": fmt.Sprint(limit)} {
			if v := c.Get(ctx, k.key(name)).Val(); v != want {
				t.Errorf("%s = %s, want %s", name, v, want)
			}
		}
	}
}

// TestMatchesMemoryStore applies random checks, peeks and deletes to Redis and
// to the reference MemoryStore and requires identical outcomes.
func TestMatchesMemoryStore(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, _ redis.UniversalClient) { matchesMemoryStore(t, s) })
}

func matchesMemoryStore(t *testing.T, s *Store) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	mem, k := ratelimit.NewMemoryStore(), newKeyer(t)
	type tmpl struct {
		name     string
		distinct bool
		ban      bool
		kind     ratelimit.OpKind // OpSliding or OpTokenBucket; else by distinct
	}
	// "c1" and "c3" also appear as sets: a key holding the other kind (a
	// foreign or older writer's) is treated as absent by both stores.
	tmpls := []tmpl{{"c1", false, true, 0}, {"c2", false, false, 0}, {"c3", false, true, 0}, {"d1", true, true, 0}, {"d2", true, false, 0}, {"c1", true, true, 0}, {"c3", true, false, 0},
		{"s1", false, true, ratelimit.OpSliding}, {"s2", false, false, ratelimit.OpSliding}, {"b1", false, true, ratelimit.OpTokenBucket}, {"b2", false, false, ratelimit.OpTokenBucket}}
	costs := []float64{0, 0.25, 0.5, 1, 2}
	const maxLimit = 4
	var all []string
	for _, tm := range tmpls {
		all = append(all, k.key(tm.name), k.ban(tm.name))
	}
	for step := range 400 {
		if rng.IntN(10) == 0 {
			var keys []string
			for _, key := range all {
				if rng.IntN(3) == 0 {
					keys = append(keys, key)
				}
			}
			n1, err1 := s.Delete(ctx, keys)
			n2, _ := mem.Delete(ctx, keys)
			if err1 != nil || n1 != n2 {
				t.Fatalf("step %d: delete %v = %d, %v; memory store %d", step, keys, n1, err1, n2)
			}
			continue
		}
		mode := check
		if rng.IntN(3) == 0 {
			mode = peek
		}
		ops := make([]ratelimit.Op, 1+rng.IntN(5))
		for i := range ops {
			tm := tmpls[rng.IntN(len(tmpls))]
			op := ratelimit.Op{
				Key: k.key(tm.name), Limit: int64(rng.IntN(maxLimit + 1)), Cost: costs[rng.IntN(len(costs))],
				Period: time.Duration(1+rng.IntN(3)) * time.Minute, Terminal: rng.IntN(2) == 0,
			}
			if tm.distinct {
				op.Kind, op.Member = ratelimit.OpDistinct, string(rune('a'+rng.IntN(4)))
			}
			if tm.kind != 0 {
				op.Kind = tm.kind
				op.Period = time.Minute // one period per key: the memory store keeps none
				if tm.kind == ratelimit.OpTokenBucket {
					op.Burst = op.Limit + int64(rng.IntN(3)) - 1
				}
			}
			if tm.ban && rng.IntN(2) == 0 {
				op.BanKey = ikeys.BanKey(op.Key)
				if rng.IntN(3) > 0 {
					op.BanFor = time.Duration(3+rng.IntN(3)) * time.Minute
				}
			}
			ops[i] = op
		}
		got := eval(t, s, mode, ops...)
		exp, _ := mem.Eval(ctx, mode, ops)
		for i := range ops {
			g, w := got[i], exp[i]
			ttlOK := g.TTL <= w.TTL+time.Second && g.TTL >= w.TTL-time.Second
			g.TTL, w.TTL = 0, 0
			if ops[i].Kind >= ratelimit.OpSliding && math.Abs(g.Count-w.Count) <= maxLimit*float64(time.Second)/float64(ops[i].Period) {
				// Time-weighted counts: the stores' clocks read apart, as
				// far apart as the TTLs may (a second, on a loaded machine),
				// in which a bucket refills at most maxLimit tokens a period
				// and a window's estimate loses at most maxLimit (its
				// previous count) a period.
				g.Count = w.Count
			}
			if g != w || !ttlOK {
				t.Fatalf("step %d (%s, seed %d): op %d %+v\n got %+v\nwant %+v", step, mode, seed, i, ops[i], got[i], exp[i])
			}
		}
	}
}

func TestEvalEdgeCases(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		if out, err := s.Eval(ctx, check, nil); err != nil || len(out) != 0 {
			t.Fatalf("no ops: %v, %v", out, err)
		}
		if n, err := s.Delete(ctx, nil); err != nil || n != 0 {
			t.Fatalf("delete nothing: %d, %v", n, err)
		}
		for _, cost := range []float64{math.NaN(), math.Inf(1)} {
			if _, err := s.Eval(ctx, check, []ratelimit.Op{k.count("a", 1, cost)}); err == nil {
				t.Errorf("cost %v accepted", cost)
			}
		}
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Eval(canceled, check, []ratelimit.Op{k.count("a", 1, 1)}); err == nil {
			t.Error("canceled context accepted")
		}
		sub := k.count("sub_ms", 5, 1)
		sub.Period = 1500 * time.Microsecond // rounds up to 2ms
		expectOutcomes(t, "sub-ms period", eval(t, s, check, sub), ok(1, 2*time.Millisecond))
		// Past 2^53 a count is reported as 2^53 (ratelimit.MaxCount).
		big := k.count("big", ratelimit.MaxCount, 1<<52)
		expectOutcomes(t, "huge cost and limit", eval(t, s, check, big, big, big), ok(1<<52, time.Minute), over(1<<53, time.Minute), over(1<<53, time.Minute))
	})
}

func TestDelete(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		var ops []ratelimit.Op
		var keys []string
		for i := range 6 {
			op := k.count(fmt.Sprint("k", i), 0, 1)
			if i%2 == 0 {
				op = banned(op, time.Hour)
			}
			ops = append(ops, op)
			keys = append(keys, op.Key, ikeys.BanKey(op.Key))
		}
		eval(t, s, check, ops...)
		n, err := s.Delete(ctx, append(keys, k.key("never")))
		if err != nil || n != 9 {
			t.Fatalf("delete = %d, %v; want 9 (6 counters, 3 bans)", n, err)
		}
		if left := keysUnder(t, c, string(k)); len(left) != 0 {
			t.Fatalf("left %v", left)
		}
	})
}

// evalShaCounter is a user's wrapper that intercepts EvalSha.
type evalShaCounter struct {
	redis.UniversalClient
	n atomic.Int64
}

func (c *evalShaCounter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c.n.Add(1)
	return c.UniversalClient.EvalSha(ctx, sha, keys, args...)
}

// TestWrapperSeesScriptCalls: go-redis' own clients get a prepared command,
// but a wrapper keeps seeing the EvalSha calls it may instrument.
func TestWrapperSeesScriptCalls(t *testing.T) {
	w := &evalShaCounter{UniversalClient: redistest.Client(t)}
	s, k := New(w), newKeyer(t)
	for i := 1; i <= 3; i++ {
		expectOutcomes(t, "wrapped", eval(t, s, check, k.count("a", 10, 1)), ok(float64(i), time.Minute))
	}
	if n := w.n.Load(); n != 3 {
		t.Fatalf("wrapper saw %d EvalSha calls for 3 checks", n)
	}
}

// A counter charged a fraction in its window's last millisecond, where PTTL
// is 0, ends that window as the memory store does: the fractional sum, which
// writes its counter again, carried the ending window's count into a new
// period, so a key checked in the last millisecond of every window (a busy
// one) never reset. Each cycle ends a 3ms window under checks; the first
// outcome of the next window must hold the one cost alone.
func TestFractionalCountInLastMillisecondEndsWindow(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		op := k.count("frac", 1<<40, 0.25)
		for cycle := range 20 {
			if err := c.Set(ctx, op.Key, "0.5", 3*time.Millisecond).Err(); err != nil {
				t.Fatal(err)
			}
			for {
				out := eval(t, s, check, op)[0]
				if out.TTL <= time.Second { // the old window, still counting
					continue
				}
				if out.Count != 0.25 {
					t.Fatalf("cycle %d: the new window's first outcome counts %v, want 0.25 (the old window's count carried)", cycle, out.Count)
				}
				break
			}
		}
	})
}
