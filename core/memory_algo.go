package ratelimit

import (
	"math"
	"strings"
	"time"
)

// The sliding window and token bucket of the memory store
// (docs/design.md#algorithms). redisstore's evaluate.lua computes the same
// with the same formulas; the conformance scenarios hold both to them.

// algoEps absorbs floating-point error when a count is compared with its
// limit or a token bucket with its capacity, so that Burst checks of cost 1
// fill it exactly, and fractional costs that add up to the limit (0.2 + 2.2
// + 0.6, which float64 sums to 3.0000000000000004) stay within it. The
// Redis script sums them in a double too, as a float64 (INCRBYFLOAT's long
// double kept what a float64 drops, and the stores parted). Above a limit
// of 17,592 the allowance is a part of the limit instead (see ceiling).
const algoEps = 1e-9

// ceiling is the largest count within limit l (a token bucket's burst):
// l plus an allowance for floating-point error, algoEps or 2^-44 of l,
// whichever is larger, and at most 0.25. A float64 rounds a sum by a part
// of its size: from 2^24 on, by more than 1e-9 alone could absorb (at a
// limit of 10^9, 999999999 + 0.1 + 0.2 + 0.7 is 1000000000.0000001). At
// most 0.25, a count a whole unit over the limit is over it at any limit
// (at 2^53 - 1, l + 0.5 would round to l + 1). evaluate.lua computes the
// same, with the same operations.
func ceiling(l float64) float64 { return l + min(max(algoEps, l*0x1p-44), 0.25) }

// overLimit reports whether count is over limit, beyond floating-point error.
func overLimit(count float64, limit int64) bool { return count > ceiling(float64(limit)) }

// applyAlgorithm evaluates an OpSliding or OpTokenBucket op into *o (zero).
//
// A sliding window entry holds the current window's count (count) and the
// previous one's (prev), and expires one Period after the current window
// ends, when neither counts any more. A token bucket entry holds nothing but
// its expiry: the bucket's theoretical arrival time (GCRA), when it is full
// again.
func (sh *memShard) applyAlgorithm(now time.Time, mode Mode, op *Op, o *OpResult) {
	o.Evaluated = true
	e, left := sh.get(op.Key, now)
	if e != nil && e.set != nil { // a foreign value: see apply
		if mode == ModeCheck {
			delete(sh.m, op.Key)
		}
		e, left = nil, 0
	}
	var banLeft time.Duration
	if op.BanKey != "" {
		if b, l := sh.get(op.BanKey, now); b != nil {
			banLeft = l
		}
	}
	charge := mode == ModeCheck && op.Cost > 0
	var v algoVerdict
	if op.Kind == OpSliding {
		cur, prev, rem := 0.0, 0.0, op.Period
		switch {
		case e == nil:
		case left > op.Period: // within the current window
			// At most a Period from now: an injected clock that stepped
			// back would otherwise weigh the previous window more than
			// whole (Redis's clock never steps back).
			cur, prev, rem = e.count, e.prev, min(left-op.Period, op.Period)
		default: // the window ended: it is now the previous one
			prev, rem = e.count, left
		}
		v = sliding(cur, prev, float64(rem), float64(op.Period), op.Limit, op.Cost)
		debt := charge && op.Spent && v.exceeded && banLeft == 0 // see Op.Spent
		if debt {
			v.count = v.before + op.Cost
		}
		if charge && banLeft == 0 && (!v.exceeded || debt) {
			if e == nil || left <= op.Period {
				if e == nil {
					e = &memEntry{}
					sh.m[strings.Clone(op.Key)] = e // the limiter lends its keys
				}
				e.count, e.prev, e.expire = cur, prev, now.Add(addDurations(rem, op.Period))
			}
			e.count += op.Cost
		}
	} else {
		d := float64(left)
		if left == math.MaxInt64 { // Sub saturated: the bucket is full later than that
			d = nanosUntil(e.expire, now)
		}
		v = bucket(d, float64(op.Period), op.Limit, op.Burst, op.Cost)
		// A debt (see Op.Spent): full again once the cost has refilled too.
		// A limit of 0 has no refill: nothing to owe.
		debt := charge && op.Spent && v.exceeded && banLeft == 0 && op.Limit > 0 && op.Burst > 0
		if debt {
			t := float64(op.Period) / float64(op.Limit) // as bucket computes it
			v.count, v.tat = v.before+op.Cost, math.Min(d+op.Cost*t, maxBucketNanos)
		}
		if charge && banLeft == 0 && (!v.exceeded || debt) {
			if e == nil {
				e = &memEntry{}
				sh.m[strings.Clone(op.Key)] = e
			}
			e.expire = addNanos(now, v.tat)
		}
	}
	if banLeft > 0 {
		o.Banned, o.Exceeded, o.TTL, o.Count = true, true, banLeft, v.before
		return
	}
	o.Exceeded, o.Count, o.TTL = v.exceeded, v.count, ceilDuration(v.ttl)
	if !charge {
		// Nothing taken: the count is what it was, and a bucket that would
		// admit the op is full again when it was going to be.
		o.Count = v.before
		if !v.exceeded && op.Kind == OpTokenBucket && op.Limit > 0 && op.Burst > 0 {
			o.TTL = left
		}
	}
	if charge && v.exceeded && op.BanFor > 0 && op.BanKey != "" {
		sh.m[strings.Clone(op.BanKey)] = &memEntry{expire: now.Add(op.BanFor)}
		o.Banned, o.TTL = true, op.BanFor
	}
}

// algoVerdict is what an algorithm says of one op, in the op's time unit
// (nanoseconds here, milliseconds in the Redis script).
type algoVerdict struct {
	exceeded bool
	before   float64 // the count before the op
	count    float64 // the count after it: before, plus the cost when it passes
	ttl      float64 // passed: until the window ends or the bucket is full; exceeded: until the same op passes, or for a cost that never does, until the rule is as good as it gets (the window empty, the bucket full)
	tat      float64 // token bucket: the time from now until it is full once the op is charged
}

// sliding is the verdict of a sliding window whose current window counts cur
// and ends in rem, and whose previous one counted prev, for an op of cost
// over period and limit. The estimate weights prev by the part of the
// previous window still inside the sliding period (rem/period).
func sliding(cur, prev, rem, period float64, limit int64, cost float64) algoVerdict {
	l := float64(limit)
	est := prev*rem/period + cur
	v := algoVerdict{before: est, count: est, ttl: rem}
	if est+cost <= ceiling(l) {
		v.count = est + cost
		return v
	}
	v.exceeded = true
	switch {
	case prev > 0 && l-cur-cost >= 0:
		// Within this window, once enough of the previous one slid out.
		v.ttl = rem - (l-cur-cost)*period/prev
	case cost > ceiling(l):
		// Never, even on an empty window: report when it is empty, this
		// window's count slid out (rem + period), else the previous one's
		// (rem), else now. A client that waits that long gets the same
		// answer, and one that retries sooner could get no other.
		switch {
		case cur > 0:
			v.ttl = rem + period
		case prev == 0:
			v.ttl = 0
		}
	case cur > l-cost:
		// In the next window, once enough of this one slid out.
		v.ttl = rem + period*(1-(l-cost)/cur)
	}
	return v
}

// bucket is the verdict of a token bucket (GCRA) that is full again in d
// (0 when full), refilled at limit per period, holding burst tokens, for an
// op of cost tokens.
func bucket(d, period float64, limit, burst int64, cost float64) algoVerdict {
	if limit <= 0 || burst <= 0 { // a limit of 0 denies all
		return algoVerdict{exceeded: cost > 0, ttl: period}
	}
	t := period / float64(limit) // one token's refill time
	used := d / t
	v := algoVerdict{before: used, count: used, ttl: d, tat: d}
	if used+cost <= ceiling(float64(burst)) {
		v.count, v.tat = used+cost, math.Min(d+cost*t, maxBucketNanos)
		v.ttl = v.tat
		return v
	}
	v.exceeded = true
	if cost <= ceiling(float64(burst)) {
		// Until enough tokens came back. (burst - cost) * t, not cost*t -
		// burst*t: the products of a large burst are rounded by far more
		// than the wait they differ by (hours, for 2^40 tokens of years).
		w := d - (float64(burst)-cost)*t
		if (d-w)/t+cost > ceiling(float64(burst)) {
			// Its terms are still rounded by an ulp of d or so: a wait
			// after which the op would not pass is 2^-50 of d (2.8µs for a
			// century) longer. Where a token refills faster than that (a
			// burst over 2^52, from Burst 0 and a larger limit), it was 0
			// or less, a block told to retry now and blocked again then.
			// (Redis rounds its wait up to a millisecond, and its real
			// clock moves more than that between two checks.)
			w = max(w, 0) + d*0x1p-50
		}
		v.ttl = w
	} // else never, even on a full bucket: report when it is full (d)
	return v
}

// maxBucketNanos bounds how long a token bucket takes to be full again:
// 2^53 ms (about 285,000 years), as redisstore keeps it (Redis refuses a
// longer PX from its script), so that both stores admit the same checks
// after it (a bucket of 2^40 tokens at one a century takes 10^14 years).
const maxBucketNanos = 1 << 53 * 1e6

// maxDurationF is 2^63, the first float64 past the longest time.Duration.
const maxDurationF = 1 << 63

// ceilDuration is d nanoseconds, rounded up: a caller told to wait this long
// never comes back early. A wait past the longest Duration (about 292 years)
// is the longest Duration: converted as it is, it would overflow into the
// past.
func ceilDuration(d float64) time.Duration {
	if d <= 0 {
		return 0
	}
	if d >= maxDurationF {
		return math.MaxInt64
	}
	return time.Duration(math.Ceil(d))
}

// A token bucket can be full again later than the longest Duration (about
// 292 years) from now: 10 a year with a burst of 10,000, once filled, takes
// 1,000 years. Its expiry is then computed in seconds, where a Duration
// would overflow into the past and the bucket read as full at once. bucket
// keeps it within maxBucketNanos; addNanos also stops at 2^62 seconds.

// addNanos is t plus d nanoseconds (d at least 0).
func addNanos(t time.Time, d float64) time.Time {
	if d < maxDurationF {
		return t.Add(time.Duration(d))
	}
	sec := math.Min(math.Floor(d/1e9), 1<<62)
	return time.Unix(t.Unix()+int64(sec), int64(t.Nanosecond())+int64(math.Mod(d, 1e9)))
}

// nanosUntil is the nanoseconds from now to t, a time after now that may
// be more than the longest Duration away.
func nanosUntil(t, now time.Time) float64 {
	return float64(t.Unix()-now.Unix())*1e9 + float64(t.Nanosecond()-now.Nanosecond())
}

// addDurations is a+b (both at least 0), at most the longest Duration: a
// sliding window of a period over 146 years (only Go's Rule.Period can hold
// one; a config file's period_s ends at 136 years) keeps its entry that
// long, its current window then ending early, instead of an expiry
// overflowed into the past that would admit every check.
func addDurations(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
