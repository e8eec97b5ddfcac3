package redisstore

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	ikeys "github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/redistest"
)

// The differential test: one seeded sequence of checks, peeks, batches and
// deletes goes to the memory store (the reference, docs/design.md) and to a
// Redis store, and every answer must be the same. It runs in the normal test
// run with a fixed seed and a modest size; -diff.steps (or
// RATEKIT_TEST_DIFF_STEPS) runs it longer and -diff.seed (or
// RATEKIT_TEST_DIFF_SEED) with another sequence.
var (
	diffSteps = flag.Int("diff.steps", 0, "steps of TestDifferential (default 300, or $RATEKIT_TEST_DIFF_STEPS)")
	diffSeed  = flag.Uint64("diff.seed", 0, "seed of TestDifferential (default fixed, or $RATEKIT_TEST_DIFF_SEED)")
)

// diffSettings returns the steps and seed of TestDifferential.
func diffSettings(t *testing.T) (int, uint64) {
	steps, seed := 300, uint64(38)
	if v := os.Getenv("RATEKIT_TEST_DIFF_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("RATEKIT_TEST_DIFF_STEPS: %v", err)
		}
		steps = n
	}
	if v := os.Getenv("RATEKIT_TEST_DIFF_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("RATEKIT_TEST_DIFF_SEED: %v", err)
		}
		seed = n
	}
	if *diffSteps > 0 {
		steps = *diffSteps
	}
	if *diffSeed != 0 {
		seed = *diffSeed
	}
	return steps, seed
}

// diffTargets are the stores compared with the memory store: every target,
// and the Dial targets once more with the plain form off, so that the
// script answers the checks the plain commands otherwise would.
func diffTargets() []target {
	all := append([]target(nil), targets...)
	for _, name := range []string{"dial", "dial_cluster"} {
		for _, tg := range targets {
			if tg.name != name {
				continue
			}
			open := tg.store
			all = append(all, target{name + "_script", func(t testing.TB) (*Store, redis.UniversalClient) {
				s, c := open(t)
				s.dialed.noPlain.Store(true)
				return s, c
			}})
		}
	}
	return all
}

// diffKey is a key of the test and what counts on it. Keys are shared by
// several ops of a check and by checks of different limits, as the rules of
// two limiters of one name (two versions of a service) share them.
type diffKey struct {
	name   string
	kind   ratelimit.OpKind
	period time.Duration // one per key: the stores keep the first one
	ban    bool          // ops on it may carry its ban key
}

// Periods are long, so that no window rolls and no bucket refills a
// noticeable part of a token during a run: the answers then do not depend on
// when each store read its clock. A token bucket's token takes its period
// over its limit: a century over at most 2^20 tokens is about an hour.
const (
	diffWindow = 1000 * time.Hour
	diffBucket = 100 * 365 * 24 * time.Hour
)

var diffKeys = []diffKey{
	{"c1", ratelimit.OpCount, diffWindow, true},
	{"c2", ratelimit.OpCount, diffWindow, false},
	{"c3", ratelimit.OpCount, 2 * diffWindow, true},
	{"d1", ratelimit.OpDistinct, diffWindow, false},
	{"d2", ratelimit.OpDistinct, 3 * diffWindow, false},
	{"s1", ratelimit.OpSliding, diffWindow, true},
	{"s2", ratelimit.OpSliding, 2 * diffWindow, false},
	{"b1", ratelimit.OpTokenBucket, diffBucket, true},
	{"b2", ratelimit.OpTokenBucket, diffBucket, false},
}

// Limits and costs: small ones, where most checks are decided, and large
// ones near the bounds a Limiter keeps an op within (MaxCount, 2^53 - 1, the
// last whole number before float64 stops holding every one): a limit of
// MaxCount, a cost of MaxCount + 1 (what any larger cost counts as), so that
// counters pass 2^53, and after 1024 such costs 2^63, where INCRBY stops.
var (
	diffSmallLimits = []int64{0, 1, 2, 3, 5, 8}
	diffLargeLimits = []int64{1 << 31, ratelimit.MaxCount - 1, ratelimit.MaxCount}
	diffSmallCosts  = []float64{0, 0.25, 0.5, 1, 1, 1, 2, 3, 1.5}
	diffLargeCosts  = []float64{0, 1, 2, 1 << 31, 1 << 40, 1<<40 + 0.5, 1<<52 + 1, ratelimit.MaxCount - 1, ratelimit.MaxCount, ratelimit.MaxCount + 1}
	// A token bucket's limits keep a token's time (its period over the
	// limit) far above a run's length.
	diffBucketLimits = []int64{0, 1, 2, 3, 5, 8, 1 << 20}
)

// diffGen draws the ops of the test from one seeded source.
type diffGen struct {
	rng *rand.Rand
	k   keyer
}

func (g *diffGen) pick(n int) int { return g.rng.IntN(n) }

// op draws one op.
func (g *diffGen) op() ratelimit.Op {
	dk := diffKeys[g.pick(len(diffKeys))]
	op := ratelimit.Op{Kind: dk.kind, Key: g.k.key(dk.name), Period: dk.period, Terminal: g.pick(2) == 0}
	large := dk.kind != ratelimit.OpDistinct && g.pick(6) == 0
	switch {
	case dk.kind == ratelimit.OpTokenBucket:
		op.Limit = diffBucketLimits[g.pick(len(diffBucketLimits))]
	case large:
		op.Limit = diffLargeLimits[g.pick(len(diffLargeLimits))]
	default:
		op.Limit = diffSmallLimits[g.pick(len(diffSmallLimits))]
	}
	if large {
		op.Cost = diffLargeCosts[g.pick(len(diffLargeCosts))]
	} else {
		op.Cost = diffSmallCosts[g.pick(len(diffSmallCosts))]
	}
	switch dk.kind {
	case ratelimit.OpDistinct:
		op.Member = string(rune('a' + g.pick(5))) // the cost as it is: the Limiter sends the check's
	case ratelimit.OpTokenBucket:
		// The Limiter's default burst is the limit; a rule's own is 1 to
		// MaxBurst.
		switch g.pick(5) {
		case 0:
			op.Burst = 1 + int64(g.pick(4))
		case 1:
			op.Burst = ratelimit.MaxBurst // full again only after centuries: past 2^53 ms
		case 2:
			op.Burst = max(op.Limit+int64(g.pick(3))-1, 1)
		default:
			op.Burst = op.Limit
		}
	}
	if dk.kind >= ratelimit.OpSliding && g.pick(4) == 0 {
		op.Spent = true // charged past the limit too (a metered cost)
	}
	if dk.ban && g.pick(2) == 0 {
		op.BanKey = ikeys.BanKey(op.Key)
		// BanFor 0: a ban key read, never written (a rule whose ban
		// was taken away while a ban lasts).
		op.BanFor = time.Duration(g.pick(4)) * diffWindow
	}
	return op
}

// check draws the ops of one check: one to five.
func (g *diffGen) check() []ratelimit.Op {
	ops := make([]ratelimit.Op, 1+g.pick(5))
	for i := range ops {
		ops[i] = g.op()
	}
	return ops
}

// TestDifferential applies one seeded sequence of checks, peeks, batches and
// deletes to the memory store and to each Redis target, and requires the
// same answers: counts, exceeded and banned, which ops were evaluated, and
// what each key holds afterwards (nothing charged past a blocking op).
func TestDifferential(t *testing.T) {
	steps, seed := diffSettings(t)
	for _, tg := range diffTargets() {
		t.Run(tg.name, func(t *testing.T) {
			s, c := tg.store(t)
			differential(t, s, c, steps, seed)
		})
	}
}

// diffAdvances are the times a step lets pass: within a window, to a
// window's end and past it, so that sliding windows weigh a previous window,
// buckets refill and bans end.
var diffAdvances = []time.Duration{time.Hour, 100 * time.Hour, 999 * time.Hour, diffWindow, 1500 * time.Hour, 2 * diffWindow}

// differential is TestDifferential on s, whose keys c reads.
func differential(t *testing.T, s *Store, c redis.UniversalClient, steps int, seed uint64) {
	t.Logf("seed %d, %d steps (-diff.seed, -diff.steps)", seed, steps)
	// Time passes for both stores alike: the memory store's clock runs
	// ahead of the real one, and Redis's keys lose as much TTL (advance).
	var ahead atomic.Int64
	mem := ratelimit.MemoryConfig{Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }}.New()
	t.Cleanup(func() { _ = mem.Close() })
	g := &diffGen{rng: rand.New(rand.NewPCG(seed, 38)), k: newKeyer(t)}
	var all []string
	for _, dk := range diffKeys {
		all = append(all, g.k.key(dk.name), g.k.ban(dk.name))
	}
	for step := range steps {
		where := fmt.Sprintf("seed %d step %d", seed, step)
		switch r := g.pick(40); {
		case r == 0: // time passes
			d := diffAdvances[g.pick(len(diffAdvances))]
			ahead.Add(int64(d))
			advance(t, s, c, string(g.k), d)
		case r <= 2: // a clear
			var keys []string
			for _, key := range all {
				if g.pick(3) == 0 {
					keys = append(keys, key)
				}
			}
			got, err := s.Delete(ctx, keys)
			if err != nil {
				t.Fatalf("%s: delete %v: %v", where, keys, err)
			}
			want, _ := mem.Delete(ctx, keys)
			if got != want {
				t.Fatalf("%s: delete %v = %d, memory store %d", where, keys, got, want)
			}
		case r <= 6: // a batch
			mode := check
			if g.pick(4) == 0 {
				mode = peek
			}
			batch := make([][]ratelimit.Op, 1+g.pick(4))
			for i := range batch {
				batch[i] = g.check()
			}
			got, err := s.EvalBatch(ctx, mode, batch)
			if err != nil {
				t.Fatalf("%s: batch: %v", where, err)
			}
			want, _ := mem.EvalBatch(ctx, mode, batch)
			for i := range batch {
				compareOps(t, fmt.Sprintf("%s batch %s #%d", where, mode, i), batch[i], got[i], want[i])
			}
			for i := range batch {
				readBack(t, fmt.Sprintf("%s batch #%d", where, i), s, mem, batch[i])
			}
		default:
			mode := check
			if r <= 14 {
				mode = peek
			}
			ops := g.check()
			got, err := s.Eval(ctx, mode, ops)
			if err != nil {
				t.Fatalf("%s: %s %+v: %v", where, mode, ops, err)
			}
			want, _ := mem.Eval(ctx, mode, ops)
			compareOps(t, fmt.Sprintf("%s %s", where, mode), ops, got, want)
			readBack(t, where, s, mem, ops)
		}
	}
}

// readBack compares what the keys of ops hold in both stores, by a peek of
// cost 0 on each (without its ban): a charge one store made past a blocking
// op, or of a rejected op, shows here even when the check's answers agreed.
func readBack(t *testing.T, where string, s *Store, mem *ratelimit.MemoryStore, ops []ratelimit.Op) {
	t.Helper()
	reads := make([]ratelimit.Op, len(ops))
	for i, op := range ops {
		reads[i] = ratelimit.Op{Kind: op.Kind, Key: op.Key, Limit: op.Limit, Period: op.Period, Burst: op.Burst}
	}
	got, err := s.Eval(ctx, peek, reads)
	if err != nil {
		t.Fatalf("%s: read back: %v", where, err)
	}
	want, _ := mem.Eval(ctx, peek, reads)
	compareOps(t, where+" read back", reads, got, want)
}

// compareOps fails unless got (Redis) and want (the memory store) agree for
// every op. TTLs agree within a second, the stores' clocks reading apart;
// counts exactly but for a token bucket's, which refills meanwhile (by far
// less than a token: see diffBucket), and a sliding window's, whose previous
// window weighs less meanwhile. Counts of 2^53 and more agree too: every
// store reports them as 2^53 (ratelimit.MaxCount).
func compareOps(t *testing.T, where string, ops []ratelimit.Op, got, want []ratelimit.OpResult) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, memory store %d", where, len(got), len(want))
	}
	for i := range ops {
		g, w := got[i], want[i]
		ttlOK := g.TTL <= w.TTL+time.Second && g.TTL >= w.TTL-time.Second
		if g.TTL > 1<<62 || w.TTL > 1<<62 {
			// Waits of centuries: the stores round them apart (Redis in
			// ms, to at most 2^53 ms), the same to a part in a million.
			ttlOK = math.Abs(float64(g.TTL)-float64(w.TTL)) <= float64(w.TTL)/1e6+float64(time.Second)
		}
		g.TTL, w.TTL = 0, 0
		if ops[i].Kind == ratelimit.OpTokenBucket && math.Abs(g.Count-w.Count) <= 1e-3 {
			g.Count = w.Count
		}
		if ops[i].Kind == ratelimit.OpSliding && math.Abs(g.Count-w.Count) <= math.Abs(w.Count)*1e-3+1e-6 {
			// A previous window's weight falls as time passes: by a
			// second's worth of the period between the stores' readings,
			// at most a thousandth of the estimate an hour or more before
			// the window's end (diffAdvances leave no less).
			g.Count = w.Count
		}
		if g != w || !ttlOK {
			t.Fatalf("%s: op %d %+v\n got %+v\nwant %+v\nall ops: %+v", where, i, ops[i], got[i], want[i], ops)
		}
	}
}

// TestDifferentialCases are the sequences TestDifferential found the stores
// answering apart, minimized: each check must give the memory store's
// answers.
func TestDifferentialCases(t *testing.T) {
	sliding := func(k keyer, limit int64, cost float64) ratelimit.Op {
		return ratelimit.Op{Kind: ratelimit.OpSliding, Key: k.key("s"), Limit: limit, Cost: cost, Period: diffWindow, Terminal: true}
	}
	cases := []struct {
		name   string
		checks func(k keyer) [][]ratelimit.Op
	}{
		// The short form charged the cost at once and took back r - cost
		// as the count: past 2^53 HINCRBY's reply was rounded (3 + 2^53
		// read 2^53 + 4), and the rejected op reported a count of 4.
		{"sliding window rejects a sum past 2^53", func(k keyer) [][]ratelimit.Op {
			return [][]ratelimit.Op{{sliding(k, 1<<53, 3)}, {sliding(k, 1<<53, 1<<53)}, {sliding(k, 1<<53, 0)}}
		}},
		// The wait of a cost a bucket holds only when full was d + cost*t -
		// burst*t: with 2^40 tokens of 50 years each, either product is
		// 10^24 ms and rounded by days (the memory store's, in ns, by
		// minutes), where the wait is d, until the bucket is full.
		{"token bucket's wait for a cost of its whole burst", func(k keyer) [][]ratelimit.Op {
			b := ratelimit.Op{Kind: ratelimit.OpTokenBucket, Key: k.key("b"), Limit: 2, Burst: ratelimit.MaxBurst, Cost: 1, Period: diffBucket, Terminal: true}
			all := b
			all.Cost = ratelimit.MaxBurst
			return [][]ratelimit.Op{{b}, {all}}
		}},
		// Past 2^52 a float64 holds no half, and 2^53 - 1 + 0.25 is 2^53 - 1:
		// the memory store admits any number of costs of 0.25 there. Redis
		// summed them in a long double (INCRBYFLOAT, HINCRBYFLOAT): 2^53 -
		// 0.5 read back as 2^53, and the third check was blocked.
		{"fractions past 2^52", func(k keyer) [][]ratelimit.Op {
			var checks [][]ratelimit.Op
			for _, kind := range []ratelimit.OpKind{ratelimit.OpCount, ratelimit.OpSliding} {
				op := ratelimit.Op{Kind: kind, Key: k.key(fmt.Sprint("f", kind)), Limit: ratelimit.MaxCount, Cost: ratelimit.MaxCount, Period: diffWindow, Terminal: true}
				checks = append(checks, []ratelimit.Op{op})
				op.Cost = 0.25
				checks = append(checks, []ratelimit.Op{op}, []ratelimit.Op{op}, []ratelimit.Op{op})
			}
			return checks
		}},
		// A fixed window is charged on every check: 1023 costs of 2^53 and
		// one of 2^53 - 1 are 2^63 - 1, which the script's reply number
		// (a double, 2^63) turned into -2^63, and where INCRBY stops.
		{"counter at 2^63 - 1", func(k keyer) [][]ratelimit.Op {
			c := ratelimit.Op{Kind: ratelimit.OpCount, Key: k.key("c"), Limit: ratelimit.MaxCount, Cost: ratelimit.MaxCount + 1, Period: diffWindow, Terminal: true}
			checks := make([][]ratelimit.Op, 0, 1026)
			for range 1023 {
				checks = append(checks, []ratelimit.Op{c})
			}
			last := c
			last.Cost = ratelimit.MaxCount
			one := c
			one.Cost = 1
			return append(checks, []ratelimit.Op{last}, []ratelimit.Op{one}, []ratelimit.Op{c})
		}},
	}
	for _, tg := range diffTargets() {
		t.Run(tg.name, func(t *testing.T) {
			s, _ := tg.store(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					mem, k := ratelimit.NewMemoryStore(), newKeyer(t)
					for i, ops := range c.checks(k) {
						got, err := s.Eval(ctx, check, ops)
						if err != nil {
							t.Fatalf("check %d: %v", i, err)
						}
						want, _ := mem.Eval(ctx, check, ops)
						compareOps(t, fmt.Sprintf("check %d", i), ops, got, want)
					}
				})
			}
		})
	}
}

// TestAdvanceLongTTL: advance moves a TTL past the longest Duration (292
// years, a token bucket's of 10 tokens a century), which go-redis's PTTL
// overflowed: the key was skipped, and time passed for the memory store
// alone (TestDifferential, seed 5).
func TestAdvanceLongTTL(t *testing.T) {
	c, k := redistest.Client(t), newKeyer(t)
	const ms = 400 * 365 * 24 * 3600 * 1000 // 400 years
	if err := c.Do(ctx, "SET", k.key("b"), "0", "PX", ms).Err(); err != nil {
		t.Fatal(err)
	}
	advance(t, nil, c, string(k), time.Hour)
	got, err := c.Do(ctx, "PTTL", k.key("b")).Int64()
	if err != nil {
		t.Fatal(err)
	}
	// Redis's clock ran meanwhile, by far less than the minute allowed.
	if want := int64(ms - 3600*1000); got > want || got < want-60*1000 {
		t.Fatalf("PTTL %d after advancing an hour, want %d", got, want)
	}
}
