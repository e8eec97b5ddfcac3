package redisstore

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	ratelimit "github.com/ratekit/ratekit/core"
	ikeys "github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/redistest"
)

func TestEvalArgs(t *testing.T) {
	ops := []ratelimit.Op{
		{Kind: ratelimit.OpCount, Key: "{a}", BanKey: "{a}:ban", Cost: 0.25, Limit: 5, Period: 1500 * time.Microsecond, BanFor: time.Hour, Terminal: true},
		{Kind: ratelimit.OpDistinct, Key: "{b}", Member: "m:1", Cost: 1, Limit: -1, Period: time.Minute},
		{Kind: ratelimit.OpCount, Key: "{c}", Cost: 1e21, Limit: 1 << 62, Period: time.Nanosecond},
	}
	keys, args := evalArgs(ratelimit.ModePeek, ops, nil)
	if got := fmt.Sprint(keys); got != "[{a} {a}:ban {b} {c}]" {
		t.Errorf("keys = %s", got)
	}
	// A peek takes the general form for every op: code, limit, period, ban,
	// cost, member.
	want := `[g031 5 2 3600000 0.25  g101 -1 60000 0 1 m:1 g001 4611686018427387904 1 0 1e+21 ]`
	if got := fmt.Sprint(args); got != want {
		t.Errorf("args = %s\nwant   %s", got, want)
	}
	keys, args = evalArgs(ratelimit.ModeCheck, ops, []int{2, 0})
	if fmt.Sprint(keys) != "[{c} {a} {a}:ban]" || fmt.Sprint(args) != "[g000 4611686018427387904 1 0 1e+21  g030 5 2 3600000 0.25 ]" {
		t.Errorf("subset: keys %v args %v", keys, args)
	}
	// The short form: a counter with a whole positive cost and no ban, in a
	// check, with a limit of 0 or more. A ban duration without a ban key is
	// no ban.
	usual := []ratelimit.Op{
		{Key: "{d}", Cost: 3, Limit: 10, Period: time.Second, Terminal: true},
		{Key: "{e}", Cost: 1, Limit: 1 << 40, Period: time.Hour, BanFor: time.Hour},
		{Key: "{f}", Cost: 1.5, Limit: 1, Period: time.Hour},
		{Key: "{g}", Cost: 1 << 53, Limit: 1, Period: time.Hour},
		{Key: "{h}", Cost: 1<<53 + 2, Limit: 1, Period: time.Hour},
		{Key: "{i}", Cost: 0, Limit: 1, Period: time.Hour},
		{Key: "{j}", Cost: 1, Limit: -1, Period: time.Hour},
		{Key: "{k}", Cost: 1, Limit: 0, Period: time.Hour},
	}
	keys, args = evalArgs(ratelimit.ModeCheck, usual, nil)
	want = `[t 10 1000 3 n 1099511627776 3600000 1 g000 1 3600000 0 1.5  n 1 3600000 9007199254740992 g000 1 3600000 0 9.007199254740994e+15  g000 1 3600000 0 0  g000 -1 3600000 0 1  n 0 3600000 1]`
	if fmt.Sprint(keys) != "[{d} {e} {f} {g} {h} {i} {j} {k}]" || fmt.Sprint(args) != want {
		t.Errorf("short form: keys %v\nargs %v\nwant %s", keys, args, want)
	}
	// The short form with a ban, and the algorithms: a sliding window and a
	// token bucket take theirs (a bucket's burst last; with a ban, in the
	// general form's layout), but for a fractional cost.
	other := []ratelimit.Op{
		{Key: "{j}", BanKey: "{j}:ban", Cost: 2, Limit: 5, Period: time.Minute, BanFor: time.Hour, Terminal: true},
		{Key: "{k}", BanKey: "{k}:ban", Cost: 1, Limit: 5, Period: time.Minute},
		{Kind: ratelimit.OpSliding, Key: "{l}", Cost: 1, Limit: 5, Period: time.Minute, Terminal: true},
		{Kind: ratelimit.OpTokenBucket, Key: "{m}", BanKey: "{m}:ban", Cost: 0.5, Limit: 5, Period: time.Minute, Burst: 7, BanFor: time.Second},
		{Kind: ratelimit.OpSliding, Key: "{n}", Cost: 3, Limit: 5, Period: time.Second},
		{Kind: ratelimit.OpTokenBucket, Key: "{o}", Cost: 2, Limit: 5, Period: time.Minute, Burst: 7, Terminal: true},
		{Kind: ratelimit.OpTokenBucket, Key: "{p}", Cost: 1, Limit: 5, Period: time.Minute, Burst: 7},
		{Kind: ratelimit.OpSliding, Key: "{q}", BanKey: "{q}:ban", Cost: 1, Limit: 5, Period: time.Minute, BanFor: time.Hour, Terminal: true},
		{Kind: ratelimit.OpTokenBucket, Key: "{r}", BanKey: "{r}:ban", Cost: 2, Limit: 5, Period: time.Minute, Burst: 7, BanFor: time.Second},
	}
	keys, args = evalArgs(ratelimit.ModeCheck, other, nil)
	want = `[B 5 60000 3600000 2 b 5 60000 0 1 W 5 60000 1 g320 5 60000 1000 0.5 7 w 5 1000 3 K 5 60000 2 7 24000 0 k 5 60000 1 7 12000 0 X 5 60000 3600000 1 y 5 60000 1000 2 7]`
	if fmt.Sprint(keys) != "[{j} {j}:ban {k} {k}:ban {l} {m} {m}:ban {n} {o} {p} {q} {q}:ban {r} {r}:ban]" || fmt.Sprint(args) != want {
		t.Errorf("bans and algorithms: keys %v\nargs %v\nwant %s", keys, args, want)
	}
	// A token bucket's short form ends with what a full bucket becomes: a
	// token of 333⅓ ms makes a TTL of 334 ms, rounded up by ⅔ ms; the TTL is
	// at least a millisecond.
	thirds := []ratelimit.Op{
		{Kind: ratelimit.OpTokenBucket, Key: "{s}", Cost: 1, Limit: 3, Period: time.Second, Burst: 3},
		{Kind: ratelimit.OpTokenBucket, Key: "{t}", Cost: 1, Limit: 4000, Period: time.Second, Burst: 1},
	}
	if _, args = evalArgs(ratelimit.ModeCheck, thirds, nil); fmt.Sprint(args) != `[k 3 1000 1 3 334 0.6666666666666856 k 4000 1000 1 1 1 0.75]` {
		t.Errorf("full buckets: args %v", args)
	}
	if _, args = evalArgs(ratelimit.ModePeek, other[3:7], nil); fmt.Sprint(args) != `[g321 5 60000 1000 0.5 7 g201 5 1000 0 3  g311 5 60000 0 2 7 g301 5 60000 0 1 7]` {
		t.Errorf("algorithms in a peek: args %v", args)
	}
	// The algorithms' short forms take neither a fractional nor a zero cost,
	// nor a limit (or burst) of zero, which denies all.
	unusual := []ratelimit.Op{
		{Kind: ratelimit.OpSliding, Key: "{q}", Cost: 0.5, Limit: 5, Period: time.Second},
		{Kind: ratelimit.OpSliding, Key: "{r}", Cost: 0, Limit: 5, Period: time.Second},
		{Kind: ratelimit.OpSliding, Key: "{s}", Cost: 1, Limit: 0, Period: time.Second},
		{Kind: ratelimit.OpTokenBucket, Key: "{t}", Cost: 1, Limit: 5, Period: time.Second},
	}
	if _, args = evalArgs(ratelimit.ModeCheck, unusual, nil); fmt.Sprint(args) != `[g200 5 1000 0 0.5  g200 5 1000 0 0  g200 0 1000 0 1  g300 5 1000 0 1 0]` {
		t.Errorf("unusual algorithm ops: args %v", args)
	}
}

func TestEvalCmd(t *testing.T) {
	ops := []ratelimit.Op{
		{Kind: ratelimit.OpCount, Key: "{a}", BanKey: "{a}:ban", Cost: 0.25, Limit: 5, Period: 1500 * time.Microsecond, BanFor: time.Hour, Terminal: true},
		{Kind: ratelimit.OpDistinct, Key: "{b}", Member: "m:1", Cost: 1, Limit: -1, Period: time.Minute},
		{Kind: ratelimit.OpCount, Key: "{c}", Cost: 1e21, Limit: 1 << 62, Period: time.Nanosecond},
	}
	for _, mode := range []ratelimit.Mode{ratelimit.ModeCheck, ratelimit.ModePeek} {
		for n := 1; n <= len(ops); n++ {
			keys, args := evalArgs(mode, ops[:n], nil)
			want := []any{"evalsha", evaluateScript.Hash(), len(keys)}
			for _, k := range keys {
				want = append(want, k)
			}
			want = append(want, args...)
			if got := evalCmd(mode, ops[:n], nil); fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
				t.Errorf("%s, %d ops: command\n%#v\nwant\n%#v", mode, n, got, want)
			}
		}
		// A group of a cluster stage: ops[idx], as if they were all the ops.
		idx := []int{2, 0}
		sub := []ratelimit.Op{ops[2], ops[0]}
		if got, want := evalCmd(mode, ops, idx), evalCmd(mode, sub, nil); fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
			t.Errorf("%s, ops %v: command\n%#v\nwant\n%#v", mode, idx, got, want)
		}
	}
	// One op without a ban: the slice and the key are all that allocates; the
	// numbers repeat, and are converted once.
	one := []ratelimit.Op{{Key: "{user:1}", Cost: 1, Limit: 100, Period: time.Minute, Terminal: true}}
	if n := testing.AllocsPerRun(100, func() { evalCmd(ratelimit.ModeCheck, one, nil) }); n > 2 {
		t.Errorf("evalCmd of one op: %v allocations, want at most 2", n)
	}
}

func TestDecodeRejectsMalformedReplies(t *testing.T) {
	for _, res := range [][]any{
		{"1", int64(5)}, // not a multiple of three
		{"1", int64(5), int64(0), "1", int64(5), int64(0), "1", int64(5), int64(0)}, // more ops than sent
		{"x", int64(5), int64(0)},     // count not a number
		{[]any{}, int64(5), int64(0)}, // count of the wrong type
		{"1", "5", int64(0)},          // ttl not an integer
		{"1", int64(5), "0"},          // bits not an integer
	} {
		if err := decode(res, make([]ratelimit.Op, 2), make([]ratelimit.OpResult, 2), nil); err == nil {
			t.Errorf("decode(%v) accepted", res)
		}
	}
	out := make([]ratelimit.OpResult, 3)
	if err := decode([]any{"0.5", int64(1500), int64(bitExceeded), int64(2), int64(10), int64(bitBanned | bitExceeded)}, make([]ratelimit.Op, 3), out, []int{2, 0}); err != nil {
		t.Fatal(err)
	}
	if out[2] != (ratelimit.OpResult{Evaluated: true, Count: 0.5, TTL: 1500 * time.Millisecond, Exceeded: true}) ||
		out[0] != (ratelimit.OpResult{Evaluated: true, Count: 2, TTL: 10 * time.Millisecond, Banned: true, Exceeded: true}) ||
		out[1].Evaluated {
		t.Errorf("decoded %+v", out)
	}
}

// TestDecodeState: a passed sliding window or token bucket op's count sent as
// the state it is computed from (bitState) decodes to the count.
func TestDecodeState(t *testing.T) {
	ops := []ratelimit.Op{
		{Kind: ratelimit.OpSliding, Limit: 10, Period: time.Minute},
		{Kind: ratelimit.OpTokenBucket, Limit: 10, Burst: 10, Period: time.Minute},
		{Kind: ratelimit.OpTokenBucket, Limit: 3, Burst: 3, Period: time.Second},
	}
	out := make([]ratelimit.OpResult, 3)
	res := []any{
		int64(90000), int64(30000), int64(bitState), // 1.5 × 60000
		"0.5", int64(6000), int64(bitState), // (6000 - 0.5) / 6000
		int64(0), int64(667), int64(bitState), // 667 ms of 333.3… per token, whole: 2.001
	}
	if err := decode(res, ops, out, nil); err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{1.5, 5999.5 / 6000, 667 / (1000.0 / 3)} {
		if math.Abs(out[i].Count-want) > 1e-12 || out[i].Exceeded || out[i].Banned {
			t.Errorf("op %d: %+v, want count %v", i, out[i], want)
		}
	}
}

// TestEvalCommandMatchesEvalArgs: the rueidis path sends the very command the
// go-redis path does, for every form of op.
func TestEvalCommandMatchesEvalArgs(t *testing.T) {
	c, err := dialStore(t, redistest.URL(t)).dialed.get()
	if err != nil {
		t.Fatal(err)
	}
	ops := []ratelimit.Op{
		{Kind: ratelimit.OpCount, Key: "{a}", BanKey: "{a}:ban", Cost: 0.25, Limit: 5, Period: 1500 * time.Microsecond, BanFor: time.Hour, Terminal: true},
		{Kind: ratelimit.OpDistinct, Key: "{a}", Member: "m:1", Cost: 1, Limit: 3, Period: time.Minute},
		{Kind: ratelimit.OpCount, Key: "{a}", Cost: 1, Limit: 1 << 40, Period: time.Hour},
		{Kind: ratelimit.OpCount, Key: "{a}", BanKey: "{a}:ban", Cost: 2, Limit: 5, Period: time.Minute, BanFor: time.Hour},
		{Kind: ratelimit.OpSliding, Key: "{a}", Cost: 1, Limit: 5, Period: time.Minute, Terminal: true},
		{Kind: ratelimit.OpSliding, Key: "{a}", BanKey: "{a}:ban", Cost: 1, Limit: 5, Period: time.Minute, BanFor: time.Hour},
		{Kind: ratelimit.OpTokenBucket, Key: "{a}", Cost: 1, Limit: 3, Period: time.Second, Burst: 3},
		{Kind: ratelimit.OpTokenBucket, Key: "{a}", BanKey: "{a}:ban", Cost: 2, Limit: 5, Period: time.Minute, Burst: 7, BanFor: time.Second},
		{Kind: ratelimit.OpTokenBucket, Key: "{a}", Cost: 0.5, Limit: 5, Period: time.Minute, Burst: 7},
	}
	for _, mode := range []ratelimit.Mode{ratelimit.ModeCheck, ratelimit.ModePeek} {
		for _, idx := range [][]int{nil, {6, 0, 3}} {
			keys, args := evalArgs(mode, ops, idx)
			want := []string{"EVALSHA", evaluateHash, strconv.Itoa(len(keys))}
			want = append(want, keys...)
			for _, a := range args {
				want = append(want, fmt.Sprint(a))
			}
			cmd := evalCommand(c, false, mode, ops, idx, nil)
			if got := cmd.Commands(); !slices.Equal(got, want) {
				t.Errorf("mode %v, ops %v:\nrueidis  %q\ngo-redis %q", mode, idx, got, want)
			}
		}
	}
}

// TestPackedReply: the script packs a lone op's three values into one integer
// when they fit (evaluate.lua, Returns) and sends the three values when they
// do not; either way they decode to the op's outcome, at the edges of every
// tier of the packing, passed and exceeded. Each case is checked twice: the
// script's reply as it comes (its type says which form it took), and the
// store's outcome for a second counter set up alike.
func TestPackedReply(t *testing.T) {
	const day = 24 * time.Hour
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		k := newKeyer(t)
		for i, tc := range []struct {
			ttl    time.Duration // the counter's TTL before the check, and the ban's length
			count  int64         // the counter after the check
			limit  int64
			packed bool
		}{
			{time.Minute, 1<<32 - 1, 1 << 40, true}, // 16 bits of TTL leave 32 for the count
			{time.Minute, 1 << 32, 1 << 40, false},
			{time.Hour, 1<<26 - 1, 1 << 40, true}, // 22 bits: 26
			{time.Hour, 1 << 26, 1 << 40, false},
			{day, 1<<21 - 1, 1 << 40, true}, // 27 bits: 21
			{day, 1 << 21, 1 << 40, false},
			{30 * day, 1<<16 - 1, 1 << 40, true}, // 32 bits: 16
			{30 * day, 1 << 16, 1 << 40, false},
			{60 * day, 5, 1 << 40, false},           // a TTL beyond 32 bits
			{time.Hour, 1<<26 - 1, 1<<26 - 2, true}, // exceeded: banned for the hour
			{30 * day, 7, 6, true},
		} {
			op := func(name string) ratelimit.Op {
				key := k.key(fmt.Sprintf("%s%d", name, i))
				if err := c.Set(ctx, key, tc.count-1, tc.ttl).Err(); err != nil {
					t.Fatal(err)
				}
				return ratelimit.Op{Kind: ratelimit.OpCount, Key: key, BanKey: ikeys.BanKey(key), Limit: tc.limit,
					Cost: 1, Period: time.Minute, BanFor: tc.ttl, Terminal: true}
			}
			exceeded := tc.count > tc.limit
			check := func(form string, got ratelimit.OpResult) {
				t.Helper()
				// The TTL is read after the set-up: a loaded machine's delay
				// lowers it, by far less than a minute.
				if got.Count != float64(tc.count) || got.TTL > tc.ttl || got.TTL < tc.ttl-time.Minute ||
					got.Exceeded != exceeded || got.Banned != exceeded || !got.Evaluated {
					t.Errorf("case %d, %s: %+v, want a count of %d, a TTL of %v, exceeded and banned %v", i, form, got, tc.count, tc.ttl, exceeded)
				}
			}

			direct := []ratelimit.Op{op("direct")}
			keys, args := evalArgs(ratelimit.ModeCheck, direct, nil)
			reply, err := c.Eval(ctx, evaluateLua, keys, args...).Result()
			if err != nil {
				t.Fatal(err)
			}
			if _, packed := reply.(int64); packed != tc.packed {
				t.Errorf("case %d: reply %v, want packed %v", i, reply, tc.packed)
			}
			out := make([]ratelimit.OpResult, 1)
			if err := decode(reply, direct, out, nil); err != nil {
				t.Fatal(err)
			}
			check("the script's reply", out[0])
			check("the store", eval(t, s, ratelimit.ModeCheck, op("store"))[0])
		}
	})
}

// TestUnpackRejectsMalformedReplies: a packed reply is refused when negative
// or when no op was sent.
func TestUnpackRejectsMalformedReplies(t *testing.T) {
	ops, out := make([]ratelimit.Op, 1), make([]ratelimit.OpResult, 1)
	if err := decode(int64(-1), ops, out, nil); err == nil {
		t.Error("a negative packed reply accepted")
	}
	if err := decode(int64(5), ops, out, []int{}); err == nil {
		t.Error("a packed reply for no op accepted")
	}
	if err := decode("5", ops, out, nil); err == nil {
		t.Error("a string reply accepted")
	}
	// 3 with a TTL of 70 s (tier 1, 22 bits) and bits 2: exceeded.
	if err := decode(int64(3<<27|70000<<5|1<<3|bitExceeded), ops, out, nil); err != nil {
		t.Fatal(err)
	}
	if want := (ratelimit.OpResult{Evaluated: true, Count: 3, TTL: 70 * time.Second, Exceeded: true}); out[0] != want {
		t.Errorf("unpacked %+v, want %+v", out[0], want)
	}
}

// TestShortRepliesRefused: the script stops only after an exceeded terminal
// op, so a reply that evaluates fewer ops than were sent and ends on any
// other op is malformed. Read as it came, it left the later ops unevaluated,
// and the Limiter, which stops at the first one, allowed the check without
// them: a reply is validated like everything else read from Redis. On the
// go-redis path (decode, the three values and the packed integer) and on
// Dial's (decodeResult, a real reply of EVAL in place of the script's).
func TestShortRepliesRefused(t *testing.T) {
	op := ratelimit.Op{Kind: ratelimit.OpCount, Key: "{a}", Limit: 5, Period: time.Minute, Cost: 1}
	blocking := op
	blocking.Terminal = true
	packed := func(count, bits int64) int64 { return count<<21 | 60000<<5 | bits } // tier 0: a TTL below 2^16
	for _, c := range []struct {
		name  string
		first ratelimit.Op // the first of two ops, the only one the reply evaluates
		reply any
		ok    bool
	}{
		{"none of two", op, []any{}, false},
		{"one of two, passed", op, []any{"1", int64(60000), int64(0)}, false},
		{"one of two, exceeded but not terminal", op, []any{"6", int64(60000), int64(bitExceeded)}, false},
		{"one of two, terminal but passed", blocking, []any{"1", int64(60000), int64(0)}, false},
		{"one of two, blocked", blocking, []any{"6", int64(60000), int64(bitExceeded)}, true},
		{"one of two, banned", blocking, []any{"6", int64(60000), int64(bitBanned | bitExceeded)}, true},
		{"packed, passed", op, packed(1, 0), false},
		{"packed, terminal but passed", blocking, packed(1, 0), false},
		{"packed, blocked", blocking, packed(6, bitExceeded), true},
	} {
		for _, idx := range [][]int{nil, {1, 0}} {
			ops := []ratelimit.Op{c.first, op}
			if idx != nil { // the first op evaluated is ops[1]
				ops[0], ops[1] = op, c.first
			}
			err := decode(c.reply, ops, make([]ratelimit.OpResult, 2), idx)
			if (err == nil) != c.ok {
				t.Errorf("%s, idx %v: decode error %v, want accepted %v", c.name, idx, err, c.ok)
			}
		}
	}

	k := newKeyer(t)
	for _, c := range []struct {
		name   string
		script string // the reply the server sends in place of evaluate.lua's
		first  ratelimit.Op
		ok     bool
	}{
		{"one of two, passed", "return {1, 60000, 0}", op, false},
		{"one of two, blocked", "return {6, 60000, 2}", blocking, true},
		{"packed, passed", fmt.Sprint("return ", packed(1, 0)), op, false},
		{"packed, blocked", fmt.Sprint("return ", packed(6, bitExceeded)), blocking, true},
	} {
		r := &recordingClient{rewrite: func(cl rueidis.Client, cmd rueidis.Completed) rueidis.Completed {
			if cmd.Commands()[0] != sentEVALSHA {
				return cmd
			}
			return cl.B().Eval().Script(c.script).Numkeys(0).Build()
		}}
		s := recordedStore(t, r)
		first, second := c.first, op
		first.Key, second.Key = k.key("first"), k.key("second")
		first.Cost = 0.5 // a fractional cost: the script, not the plain form
		_, err := s.Eval(ctx, ratelimit.ModeCheck, []ratelimit.Op{first, second})
		if (err == nil) != c.ok {
			t.Errorf("Dial, %s: Eval error %v, want accepted %v", c.name, err, c.ok)
		}
	}
}
