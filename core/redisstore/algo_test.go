package redisstore

import (
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
)

// TestAlgorithmShortFormsHandOver: the short forms of the sliding window and
// the token bucket hand what they cannot evaluate (a value of another type, a
// fractional count) to the general code before writing anything, so the
// outcome is the one of a fresh key, or of the fraction, as in the memory
// store.
func TestAlgorithmShortFormsHandOver(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		sliding := func(name string, cost float64) ratelimit.Op {
			return ratelimit.Op{Kind: ratelimit.OpSliding, Key: k.key(name), Limit: 10, Cost: cost, Period: time.Minute, Terminal: true}
		}
		bucket := ratelimit.Op{Kind: ratelimit.OpTokenBucket, Key: k.key("bucket"), Limit: 10, Burst: 10, Cost: 1, Period: time.Minute}

		// A string where a sliding window's hash belongs, in this window (a
		// TTL over the period) and in the previous one.
		for name, ttl := range map[string]time.Duration{"on": 90 * time.Second, "ended": 30 * time.Second} {
			op := sliding(name, 1)
			if err := c.Set(ctx, op.Key, "x", ttl).Err(); err != nil {
				t.Fatal(err)
			}
			expectOutcomes(t, "sliding over a string, "+name, eval(t, s, check, op), ok(1, time.Minute))
			if got, err := c.HGet(ctx, op.Key, "c").Result(); err != nil || got != "1" {
				t.Errorf("%s: the string was not replaced by a window: c = %q, %v", name, got, err)
			}
		}

		// A set where a token bucket's string belongs.
		if err := c.SAdd(ctx, bucket.Key, "m").Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Expire(ctx, bucket.Key, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		expectOutcomes(t, "bucket over a set", eval(t, s, check, bucket), ok(1, 6*time.Second))
		if got, err := c.Get(ctx, bucket.Key).Result(); err != nil || got != "0" {
			t.Errorf("the set was not replaced by a bucket: %q, %v", got, err)
		}

		// A fractional count (the general form's), then whole costs (the
		// short form's): the count stays exact.
		frac := sliding("frac", 0.5)
		expectOutcomes(t, "fractional cost", eval(t, s, check, frac), ok(0.5, time.Minute))
		whole := sliding("frac", 1)
		expectOutcomes(t, "whole cost on a fraction", eval(t, s, check, whole), ok(1.5, time.Minute))
		expectOutcomes(t, "whole cost again", eval(t, s, check, whole), ok(2.5, time.Minute))
		if got, err := c.HGet(ctx, whole.Key, "c").Result(); err != nil || got != "2.5" {
			t.Errorf("c = %q, %v; want 2.5", got, err)
		}

		// A large whole cost is written exactly, not as a Lua number.
		big := sliding("big", 123456789012345)
		big.Limit = 1 << 50
		expectOutcomes(t, "large cost", eval(t, s, check, big), ok(123456789012345, time.Minute))
		if got, err := c.HGet(ctx, big.Key, "c").Result(); err != nil || got != "123456789012345" {
			t.Errorf("c = %q, %v; want 123456789012345", got, err)
		}
	})
}

// TestAlgorithmFractionalCounts: a passed sliding window or token bucket op
// whose count has a fraction (the previous window's weighted share; a token
// period of a fraction of a millisecond) is sent as the state it is computed
// from, not as a decimal string, and comes out as the memory store's count.
func TestAlgorithmFractionalCounts(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		// A window half over whose previous window counted 7 and this one 3:
		// the estimate is 7 × ½ + 3, and 1 more after the check. Time passing
		// only lowers it, by 7/3,600,000 a millisecond: a loaded machine's
		// delay between the set-up and the check stays far within 0.05.
		slide := ratelimit.Op{Kind: ratelimit.OpSliding, Key: k.key("slide"), Limit: 100, Cost: 1, Period: time.Hour, Terminal: true}
		if err := c.HSet(ctx, slide.Key, "c", "3", "p", "7").Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.PExpire(ctx, slide.Key, 90*time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		got := eval(t, s, check, slide)[0]
		if got.Count > 7.5 || got.Count < 7.45 || got.Exceeded {
			t.Errorf("sliding window: %+v, want a count of 7.5", got)
		}

		// Three tokens per 1,000 s: a token is 333,333⅓ ms, so the bucket's
		// time is rounded up to 333,334 ms, ⅔ ms more than its count's worth.
		// (A long period: the key outlives any delay before GET.)
		bucket := ratelimit.Op{Kind: ratelimit.OpTokenBucket, Key: k.key("bucket"), Limit: 3, Burst: 3, Cost: 1, Period: 1000 * time.Second, Terminal: true}
		got = eval(t, s, check, bucket)[0]
		if math.Abs(got.Count-1) > 1e-9 || got.TTL != 333334*time.Millisecond {
			t.Errorf("token bucket, first check: %+v, want a count of 1 and a TTL of 333334ms", got)
		}
		if v, err := c.Get(ctx, bucket.Key).Result(); err != nil || math.Abs(parseFloat(t, v)-2.0/3) > 1e-9 {
			t.Errorf("token bucket value %q, %v; want the rounding, ⅔ ms", v, err)
		}
		// The first check found the bucket full (the client computed what it
		// became); the second finds a token in use and sends its state. Its
		// count is 2, less the time passed since (1 a token, 333,333⅓ ms),
		// and its whole TTL is the count's worth of time plus ⅓ ms (a whole
		// number of ms, less ⅔, plus 333,333⅓).
		got = eval(t, s, check, bucket)[0]
		const token = 1e6 / 3.0 // ms
		if got.Count > 2 || got.Count < 1.99 || got.Exceeded {
			t.Errorf("token bucket, second check: %+v, want a count of 2", got)
		}
		if over := float64(got.TTL.Milliseconds()) - got.Count*token; math.Abs(over-1.0/3) > 1e-6 {
			t.Errorf("token bucket, second check: the TTL is %v ms over the count's time, want ⅓", over)
		}
	})
}

// TestCounterLimitDigits: the counter's short forms compare a count with the
// limit by its number of digits first; counts just under, at and over limits
// of one digit and more come out as exceeded exactly when over.
func TestCounterLimitDigits(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, _ redis.UniversalClient) {
		k := newKeyer(t)
		for i, tc := range []struct {
			limit int64
			costs []float64 // charged in turn; the last one's count is checked
			over  bool
		}{
			{0, []float64{1}, true},
			{1, []float64{1}, false},
			{1, []float64{2}, true},
			{9, []float64{9}, false},
			{9, []float64{10}, true},
			{10, []float64{9}, false},
			{10, []float64{10}, false},
			{10, []float64{10, 1}, true},
			{99, []float64{100}, true},
			{100, []float64{99, 1}, false},
			{100, []float64{99, 2}, true},
			{123456, []float64{99999}, false},
			{123456, []float64{123457}, true},
		} {
			for _, withBan := range []bool{false, true} {
				name := fmt.Sprintf("l%d-%d-%v", tc.limit, i, withBan)
				op := k.count(name, tc.limit, 0)
				if withBan {
					op = banned(op, 0) // a ban key, no ban: the short form with a ban
				}
				var got []ratelimit.OpResult
				count := 0.0
				for _, c := range tc.costs {
					op.Cost = c
					got = eval(t, s, check, op)
					count += c
				}
				if got[0].Exceeded != tc.over || got[0].Count != count {
					t.Errorf("%s: limit %d, count %v: %+v, want exceeded %v", name, tc.limit, count, got[0], tc.over)
				}
			}
		}
	})
}

// TestBanShortFormHandsOver: the counter's short form with a ban hands a
// fractional or foreign counter to the general code, which wrote nothing
// before: each op is charged once, and a foreign value is replaced.
func TestBanShortFormHandsOver(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		frac := banned(k.count("frac", 10, 1), time.Hour)
		if err := c.Set(ctx, frac.Key, "1.5", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		expectOutcomes(t, "fractional", eval(t, s, check, frac), ok(2.5, time.Minute))
		expectOutcomes(t, "fractional again", eval(t, s, check, frac), ok(3.5, time.Minute))

		foreign := banned(k.count("foreign", 1, 2), time.Hour)
		if err := c.SAdd(ctx, foreign.Key, "m").Err(); err != nil {
			t.Fatal(err)
		}
		expectOutcomes(t, "foreign", eval(t, s, check, foreign), ban(2, time.Hour))
		if got, err := c.Get(ctx, foreign.Key).Result(); err != nil || got != "2" {
			t.Errorf("the foreign value was not replaced by a counter: %q, %v", got, err)
		}
		// Banned now: a foreign value under an active ban reads as absent.
		if err := c.Del(ctx, foreign.Key).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.SAdd(ctx, foreign.Key, "m").Err(); err != nil {
			t.Fatal(err)
		}
		expectOutcomes(t, "foreign under a ban", eval(t, s, check, foreign), ban(0, time.Hour))
	})
}

// TestAlgorithmShortFormsWithBan: a sliding window and a token bucket with a
// ban start the ban on the op that exceeds, charge nothing while it lasts,
// and hand an op under an active ban, or over a foreign value, to the
// general code.
func TestAlgorithmShortFormsWithBan(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		sliding := banned(ratelimit.Op{Kind: ratelimit.OpSliding, Key: k.key("sliding"), Limit: 2, Cost: 1, Period: time.Minute, Terminal: true}, time.Hour)
		expectOutcomes(t, "sliding 1", eval(t, s, check, sliding), ok(1, time.Minute))
		expectOutcomes(t, "sliding 2", eval(t, s, check, sliding), ok(2, time.Minute))
		expectOutcomes(t, "sliding 3", eval(t, s, check, sliding), ban(2, time.Hour))
		expectOutcomes(t, "sliding banned", eval(t, s, check, sliding), ban(2, time.Hour))
		if got, err := c.HGet(ctx, sliding.Key, "c").Result(); err != nil || got != "2" {
			t.Errorf("sliding: c = %q, %v; want 2 (nothing charged past the limit)", got, err)
		}

		bucket := banned(ratelimit.Op{Kind: ratelimit.OpTokenBucket, Key: k.key("bucket"), Limit: 10, Burst: 2, Cost: 1, Period: time.Minute}, time.Hour)
		// Tokens come back as time passes: counts are checked to within a
		// second's worth (one token per 6s).
		for i, w := range []struct {
			exceeded, banned bool
			count            float64
		}{{false, false, 1}, {false, false, 2}, {true, true, 2}, {true, true, 2}} {
			got := eval(t, s, check, bucket)[0]
			if got.Exceeded != w.exceeded || got.Banned != w.banned || got.Count > w.count || got.Count < w.count-1.0/6 ||
				(w.banned && got.TTL <= 59*time.Minute) {
				t.Errorf("bucket check %d: %+v, want %+v", i+1, got, w)
			}
		}

		// No ban duration: exceeded, never banned.
		noBan := banned(ratelimit.Op{Kind: ratelimit.OpSliding, Key: k.key("noban"), Limit: 1, Cost: 2, Period: time.Minute}, 0)
		if got := eval(t, s, check, noBan)[0]; !got.Exceeded || got.Banned || got.Count != 0 {
			t.Errorf("exceeded without a ban duration: %+v", got)
		}

		// A foreign value under the with-ban short form.
		foreign := banned(ratelimit.Op{Kind: ratelimit.OpTokenBucket, Key: k.key("foreign"), Limit: 10, Burst: 10, Cost: 1, Period: time.Minute}, time.Hour)
		if err := c.SAdd(ctx, foreign.Key, "m").Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Expire(ctx, foreign.Key, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		expectOutcomes(t, "bucket over a set", eval(t, s, check, foreign), ok(1, 6*time.Second))
	})
}

func parseFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestNonNumericValueIsForeign: a value of the right type that is not a
// number (a hand-written one) is foreign, as a value of another type is: a
// check replaces it with a fresh counter, window or bucket, a peek reads it
// as absent, in every form of the script and in the plain commands. Before,
// INCRBY/INCRBYFLOAT/HINCRBYFLOAT refused it and every check of the key
// failed until it expired. Each case's outcome must be that of the same op on
// an absent key, set up alike (a ban, say).
func TestNonNumericValueIsForeign(t *testing.T) {
	count := func(k keyer, name string) ratelimit.Op { return terminal(k.count(name, 10, 2)) }
	sliding := func(k keyer, name string) ratelimit.Op {
		return ratelimit.Op{Kind: ratelimit.OpSliding, Key: k.key(name), Limit: 10, Cost: 2, Period: time.Minute, Terminal: true}
	}
	// A day's period: the bucket refills between the absent key's check and
	// the foreign one's, and their counts must agree within 0.01 token,
	// which at 10 a minute a loaded machine's stall of 60ms exceeded (a
	// count of 0.944 against 0.999); at 10 a day it takes 86s.
	bucket := func(k keyer, name string) ratelimit.Op {
		return ratelimit.Op{Kind: ratelimit.OpTokenBucket, Key: k.key(name), Limit: 10, Burst: 10, Cost: 2, Period: 24 * time.Hour, Terminal: true}
	}
	withBan := func(f func(keyer, string) ratelimit.Op) func(keyer, string) ratelimit.Op {
		return func(k keyer, name string) ratelimit.Op { return banned(f(k, name), time.Hour) }
	}
	frac := func(f func(keyer, string) ratelimit.Op) func(keyer, string) ratelimit.Op {
		return func(k keyer, name string) ratelimit.Op { op := f(k, name); op.Cost = 0.5; return op }
	}
	set := func(v string, ttl time.Duration) func(c redis.UniversalClient, key string) error {
		return func(c redis.UniversalClient, key string) error { return c.Set(ctx, key, v, ttl).Err() }
	}
	// hash writes fields into a sliding window's hash whose TTL is ttl: over
	// the period, this window is on; within it, it ended.
	hash := func(ttl time.Duration, fields ...string) func(c redis.UniversalClient, key string) error {
		return func(c redis.UniversalClient, key string) error {
			if err := c.HSet(ctx, key, fields).Err(); err != nil {
				return err
			}
			return c.PExpire(ctx, key, ttl).Err()
		}
	}
	cases := []struct {
		name   string
		op     func(keyer, string) ratelimit.Op
		mode   ratelimit.Mode
		value  func(c redis.UniversalClient, key string) error
		banned bool // an active ban on both keys
	}{
		{"counter", count, check, set("hello", time.Minute), false},
		{"counter without a TTL", count, check, set("hello", 0), false},
		{"counter nan", count, check, set("nan", time.Minute), false},
		{"counter inf", count, check, set("inf", time.Minute), false},
		{"counter fractional cost", frac(count), check, set("hello", time.Minute), false},
		{"counter peek", count, peek, set("hello", time.Minute), false},
		{"counter peek nan", count, peek, set("nan", time.Minute), false},
		{"counter with a ban", withBan(count), check, set("hello", time.Minute), false},
		{"counter banned", withBan(count), check, set("hello", time.Minute), true},
		{"counter banned peek", withBan(count), peek, set("hello", time.Minute), true},
		{"sliding this window", sliding, check, hash(90*time.Second, "c", "hello"), false},
		{"sliding previous count", sliding, check, hash(90*time.Second, "c", "1", "p", "nan"), false},
		{"sliding previous count hello", sliding, check, hash(90*time.Second, "c", "1", "p", "hello"), false},
		{"sliding previous count empty", sliding, check, hash(90*time.Second, "c", "1", "p", ""), false},
		{"sliding previous count with a ban", withBan(sliding), check, hash(90*time.Second, "c", "1", "p", "hello"), false},
		{"sliding ended window", sliding, check, hash(30*time.Second, "c", "hello"), false},
		{"sliding nan", sliding, check, hash(90*time.Second, "c", "nan"), false},
		{"sliding fractional cost", frac(sliding), check, hash(90*time.Second, "c", "hello"), false},
		{"sliding peek", sliding, peek, hash(90*time.Second, "c", "hello", "p", "hello"), false},
		{"sliding with a ban", withBan(sliding), check, hash(90*time.Second, "c", "hello", "p", "nan"), false},
		{"sliding banned", withBan(sliding), check, hash(90*time.Second, "c", "hello"), true},
		{"bucket", bucket, check, set("hello", 30*time.Second), false},
		{"bucket nan", bucket, check, set("nan", 30*time.Second), false},
		{"bucket -inf", bucket, check, set("-inf", 30*time.Second), false},
		{"bucket fractional cost", frac(bucket), check, set("-inf", 30*time.Second), false},
		{"bucket peek", bucket, peek, set("nan", 30*time.Second), false},
		{"bucket with a ban", withBan(bucket), check, set("nan", 30*time.Second), false},
		{"bucket banned", withBan(bucket), check, set("-inf", 30*time.Second), true},
	}
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		for i, tc := range cases {
			foreign, absent := tc.op(k, fmt.Sprint("foreign", i)), tc.op(k, fmt.Sprint("absent", i))
			if tc.banned {
				for _, key := range []string{foreign.BanKey, absent.BanKey} {
					if err := c.Set(ctx, key, "1", time.Hour).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := tc.value(c, foreign.Key); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			for step := 1; step <= 2; step++ {
				want := eval(t, s, tc.mode, absent)[0]
				got, err := s.Eval(ctx, tc.mode, []ratelimit.Op{foreign})
				if err != nil {
					t.Errorf("%s, %s %d: %v", tc.name, tc.mode, step, err)
					break
				}
				if g, w := got[0], want; g.Evaluated != w.Evaluated || g.Exceeded != w.Exceeded || g.Banned != w.Banned ||
					math.Abs(g.Count-w.Count) > 0.01 || g.TTL > w.TTL+time.Second || g.TTL < w.TTL-ttlSlack(w.TTL) {
					t.Errorf("%s, %s %d: %+v; on an absent key %+v", tc.name, tc.mode, step, g, w)
				}
			}
		}
		// A sliding window after another op of its check, and in a batch:
		// the other op is charged once, the hash is replaced.
		first := k.count("before", 10, 1)
		op := sliding(k, "later")
		if err := hash(90*time.Second, "c", "1", "p", "hello")(c, op.Key); err != nil {
			t.Fatal(err)
		}
		got, err := s.Eval(ctx, check, []ratelimit.Op{first, op})
		if err != nil {
			t.Fatalf("a later op: %v", err)
		}
		if got[0].Count != 1 || got[1].Count != 2 || got[1].Exceeded {
			t.Errorf("a later op: %+v; want the counter at 1 and a fresh window at 2", got)
		}
		batchOp := sliding(k, "batch")
		if err := hash(90*time.Second, "c", "1", "p", "hello")(c, batchOp.Key); err != nil {
			t.Fatal(err)
		}
		outs, err := s.EvalBatch(ctx, check, [][]ratelimit.Op{{batchOp}, {batchOp}})
		if err != nil {
			t.Fatalf("a batch: %v", err)
		}
		if outs[0][0].Count != 2 || outs[1][0].Count != 4 {
			t.Errorf("a batch: %+v; want a fresh window at 2, then 4", outs)
		}
	})
}

// TestAbsurdWaitsSaturate: a wait past the longest Duration (about 292
// years: a token bucket of 10 at one a century, full in 1,000 years once
// emptied, a sliding window of 200 years exceeded, a window of the longest
// period) is the longest Duration, as in the memory store; before, the
// milliseconds Redis sent overflowed into a negative or wrapped TTL (and a
// ResetAt in the past). An absurd cost, which no bucket ever holds, waits
// until the bucket is full: now, for a full one. (The memory store keeps a
// window of over 146 years until the longest Duration from its start, which
// the sliding window's wait then ends with: Redis is held to the longest.)
func TestAbsurdWaitsSaturate(t *testing.T) {
	const year = 365 * 24 * time.Hour
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		mem := ratelimit.NewMemoryStore()
		bucket := func(name string, cost float64) ratelimit.Op {
			return ratelimit.Op{Kind: ratelimit.OpTokenBucket, Key: k.key(name), Limit: 1, Burst: 10, Cost: cost, Period: time.Hour}
		}
		century := ratelimit.Op{Kind: ratelimit.OpTokenBucket, Key: k.key("century"), Limit: 1, Burst: 10, Cost: 10, Period: 100 * year}
		sliding := ratelimit.Op{Kind: ratelimit.OpSliding, Key: k.key("sliding"), Limit: 1, Cost: 1, Period: 200 * year}
		eval(t, s, check, century) // emptied and filled: the next ops wait
		eval(t, s, check, sliding)
		if _, err := mem.Eval(ctx, check, []ratelimit.Op{century}); err != nil {
			t.Fatal(err)
		}
		longest := k.count("longest", 10, 1)
		longest.Period = math.MaxInt64
		for _, op := range []ratelimit.Op{
			bucket("1e10", 1e10), bucket("1e300", 1e300), bucket("max", math.MaxFloat64), century, sliding, longest,
		} {
			for _, mode := range []ratelimit.Mode{check, peek} {
				got, err := s.Eval(ctx, mode, []ratelimit.Op{op})
				if err != nil {
					t.Errorf("%s %s: %v", op.Key, mode, err)
					continue
				}
				if (op.Key == century.Key || op.Key == sliding.Key) && (!got[0].Exceeded || got[0].TTL != math.MaxInt64) {
					t.Errorf("%s %s: %+v; want exceeded for the longest Duration", op.Key, mode, got[0])
				}
				if op.Key == sliding.Key {
					continue
				}
				want, err := mem.Eval(ctx, mode, []ratelimit.Op{op})
				if err != nil {
					t.Fatal(err)
				}
				// Redis keeps whole milliseconds, rounded up: up to 1ms over;
				// and where both saturate, Redis at the longest Duration, the
				// memory store's TTL is less by the time since its check.
				if g, w := got[0], want[0]; g.Exceeded != w.Exceeded || g.TTL < w.TTL-ttlSlack(w.TTL) || g.TTL-time.Millisecond-2*time.Second > w.TTL {
					t.Errorf("%s %s: %+v; the memory store: %+v", op.Key, mode, g, w)
				}
			}
		}
	})
}

// TestLongestBucket: a token bucket full again only after 2^53 ms (285,000
// years; 2^40 tokens at one a century take 10^14 years) is kept at that, as
// in the memory store, and both admit the same checks after it. Before, Redis
// refused the PX the script sent (Lua formats it with an exponent) and every
// check of the bucket failed open.
func TestLongestBucket(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		mem := ratelimit.NewMemoryStore()
		op := ratelimit.Op{Kind: ratelimit.OpTokenBucket, Key: k.key("b"), Limit: 1, Burst: ratelimit.MaxBurst, Period: 100 * 365 * 24 * time.Hour}
		// The full bucket's form, the short form, the general code, a peek.
		for i, step := range []struct {
			mode ratelimit.Mode
			cost float64
		}{{check, ratelimit.MaxBurst}, {check, 1}, {check, 0.5}, {peek, 1}, {check, ratelimit.MaxBurst}} {
			op.Cost = step.cost
			got, err := s.Eval(ctx, step.mode, []ratelimit.Op{op})
			if err != nil {
				t.Fatalf("step %d: %v", i+1, err)
			}
			want, err := mem.Eval(ctx, step.mode, []ratelimit.Op{op})
			if err != nil {
				t.Fatal(err)
			}
			if g, w := got[0], want[0]; g.Exceeded != w.Exceeded || math.Abs(g.Count-w.Count) > 1e-6*w.Count ||
				g.TTL < w.TTL-ttlSlack(w.TTL) || g.TTL-time.Millisecond > w.TTL {
				t.Errorf("step %d (%s, cost %v): %+v; the memory store: %+v", i+1, step.mode, step.cost, g, w)
			}
		}
	})
}
