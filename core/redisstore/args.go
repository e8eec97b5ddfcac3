package redisstore

import (
	"math"
	"strconv"
	"sync/atomic"

	ratelimit "github.com/ratekit/ratekit/core"
)

// The KEYS and ARGV of evaluate.lua, shared by the go-redis path (which needs
// []any arguments) and the rueidis path (which needs strings), so that both
// send the very same command for the same ops. evaluate.lua's
// header describes the layout.

// maxBucketMillis is the longest a token bucket takes to be full again in
// Redis, 2^53 ms (about 285,000 years), as in the memory store and
// evaluate.lua: Redis refuses a longer PX from Lua, which formats it with
// an exponent.
const maxBucketMillis = 1 << 53

// modeGeneral is a check with every op in the script's general form, sent
// once more for a script call that a sliding window's previous count, no
// number, failed (isForeignPrevious): the general form replaces that hash.
// It is this package's only, and no other Mode: the short forms take
// ModeCheck only (but an op already sent in a known-window form stays in
// it: evalCommand), and the general form's peek flag is ModePeek's.
const modeGeneral ratelimit.Mode = 1<<8 - 1

// maxShortCost is the largest cost the short form takes: every whole float64
// up to it prints exactly as an integer.
const maxShortCost = 1 << 53

// short reports whether op takes the script's short form: a counter charged
// with a whole positive cost, without a ban, in a check, with a limit of 0 or
// more (which the script compares by its digits first). It is the usual op,
// and the short form spares the script most of its work.
func short(mode ratelimit.Mode, op *ratelimit.Op) bool {
	if mode != ratelimit.ModeCheck || op.Kind != ratelimit.OpCount || op.BanKey != "" || op.Limit < 0 {
		return false
	}
	c, ok := wholeCost(op.Cost)
	return ok && c > 0
}

// shortBan reports whether op takes the script's short form with a ban: a
// counter charged with a whole positive cost, with a ban, in a check, with a
// limit of 0 or more.
func shortBan(mode ratelimit.Mode, op *ratelimit.Op) bool {
	if mode != ratelimit.ModeCheck || op.Kind != ratelimit.OpCount || op.BanKey == "" || op.Limit < 0 {
		return false
	}
	c, ok := wholeCost(op.Cost)
	return ok && c > 0
}

// shortAlgorithm reports whether op takes a short form of its algorithm: a
// sliding window or a token bucket charged with a whole positive cost, in a
// check, with a positive limit (and burst, no less than the cost: a full
// bucket then always takes the cost, which the script need not test).
func shortAlgorithm(mode ratelimit.Mode, op *ratelimit.Op) bool {
	if mode != ratelimit.ModeCheck || op.Limit <= 0 || op.Spent {
		return false
	}
	if op.Kind != ratelimit.OpSliding && (op.Kind != ratelimit.OpTokenBucket || op.Burst <= 0) {
		return false
	}
	c, ok := wholeCost(op.Cost)
	return ok && c > 0 && (op.Kind != ratelimit.OpTokenBucket || c <= op.Burst)
}

// opCodes are the codes of ARGV: the general form's "g<kind><flags><peek>",
// indexed by kind*8 + flags*2 + peek, then the short forms', each
// non-terminal, terminal: a counter's "n" and "t" (without a ban) and "b" and
// "B" (with one), a sliding window's "w" and "W" (and "x", "X"), a token
// bucket's "k" and "K" (and "y", "Y", which take the general form's fields),
// then the general form of a spent sliding window's or token bucket's check
// (flags + 4), indexed 44 + (kind-2)*4 + flags, then the counter's known-window
// forms (knownCode): "u" and "U" without a ban, "v" and "V" with one.
var opCodes = [56]string{
	"g000", "g001", "g010", "g011", "g020", "g021", "g030", "g031",
	"g100", "g101", "g110", "g111", "g120", "g121", "g130", "g131",
	"g200", "g201", "g210", "g211", "g220", "g221", "g230", "g231",
	"g300", "g301", "g310", "g311", "g320", "g321", "g330", "g331",
	"n", "t", "b", "B", "w", "W", "k", "K", "x", "X", "y", "Y",
	"g240", "g250", "g260", "g270", "g340", "g350", "g360", "g370",
	"u", "U", "v", "V",
}

// opCodeArgs are opCodes converted to interfaces once: converting a string
// that is not a constant to an interface allocates.
var opCodeArgs = func() (a [len(opCodes)]any) {
	for i, c := range opCodes {
		a[i] = c
	}
	return a
}()

// opCode is the index in opCodes of op's code.
func opCode(mode ratelimit.Mode, op *ratelimit.Op) int {
	if short(mode, op) {
		if op.Terminal {
			return 33
		}
		return 32
	}
	if shortBan(mode, op) {
		if op.Terminal {
			return 35
		}
		return 34
	}
	if shortAlgorithm(mode, op) {
		i := 36
		if op.Kind == ratelimit.OpTokenBucket {
			i = 38
		}
		if op.BanKey != "" {
			i += 4
		}
		if op.Terminal {
			i++
		}
		return i
	}
	flags := 0
	if op.Terminal {
		flags++
	}
	if op.BanKey != "" {
		flags += 2
	}
	if op.Spent && mode == ratelimit.ModeCheck && op.Kind >= ratelimit.OpSliding {
		return 44 + int(op.Kind-ratelimit.OpSliding)*4 + flags
	}
	i := int(op.Kind&3)*8 + flags*2
	if mode == ratelimit.ModePeek {
		i++
	}
	return i
}

// knownCode is the index in opCodes of the known-window form of op, a counter
// that takes the short form (short or shortBan) and whose window the Store
// remembers (windows): INCRBY alone, after the ban's PTTL when it has one,
// and only the count in the reply; the Store knows the TTL and derives the
// bits (decodeKnown). The script hands an op back (a nil reply value) that
// it did not charge: banned, or a value INCRBY refuses.
func knownCode(op *ratelimit.Op) int {
	i := 52
	if op.BanKey != "" {
		i = 54
	}
	if op.Terminal {
		i++
	}
	return i
}

// isKnown reports whether code (an index in opCodes) is a known-window form.
func isKnown(code int) bool { return code >= 52 }

// keyCount is the number of KEYS of op: its key, and its ban key if any.
func keyCount(op *ratelimit.Op) int {
	if op.BanKey == "" {
		return 1
	}
	return 2
}

// isShort reports whether code (an index in opCodes) has the fields of a
// short form: all but the general form's and "y", "Y".
func isShort(code int) bool { return code >= 32 && code < 42 || isKnown(code) }

// fieldsOf returns op's numeric fields as integers: limit, period_ms (but in
// a known-window form) and, in the general form and the forms with a ban,
// ban_ms, then the cost,
// which the short forms always have whole, and a token bucket's short form
// ends with the burst. A general form's cost that is not whole is not among
// them (fracCost): it follows them as a float. The general form's member (or
// burst) comes after all.
func fieldsOf(code int, op *ratelimit.Op) (f [4]int64, n int, fracCost bool) {
	f[0], f[1] = op.Limit, millis(op.Period)
	switch {
	case code >= 54: // a known window with a ban: no period
		f[1], f[2] = millis(op.BanFor), int64(op.Cost)
		return f, 3, false
	case code >= 52: // a known window: no period
		f[1] = int64(op.Cost)
		return f, 2, false
	case code >= 42: // a token bucket with a ban: the general form's fields
	case code >= 40: // a sliding window with a ban
		f[2], f[3] = millis(op.BanFor), int64(op.Cost)
		return f, 4, false
	case code >= 38: // a token bucket
		f[2], f[3] = int64(op.Cost), op.Burst
		return f, 4, false
	case code >= 36: // a sliding window
		f[2] = int64(op.Cost)
		return f, 3, false
	case code >= 34: // with a ban: whole cost
		f[2], f[3] = millis(op.BanFor), int64(op.Cost)
		return f, 4, false
	case isShort(code):
		f[2] = int64(op.Cost)
		return f, 3, false
	}
	f[2] = millis(op.BanFor)
	if c, ok := wholeCost(op.Cost); ok {
		f[3] = c
		return f, 4, false
	}
	return f, 3, true
}

// wholeCost returns cost as an integer when it is one that prints exactly as
// one: costs are written in decimal digits where they can be, which the
// script's INCRBY takes.
func wholeCost(cost float64) (int64, bool) {
	if cost < -maxShortCost || cost > maxShortCost || cost != math.Trunc(cost) {
		return 0, false
	}
	return int64(cost), true
}

// numArg is n as an argument of the go-redis path: a decimal string in an
// interface, which costs an allocation to make. Most numbers repeat from check
// to check (a rule's limit and period, a cost of 1), so they are kept in a
// small table with one slot per hash of n: a repeated number costs nothing, a
// colliding one replaces the slot's. The table is fixed-size, so numbers that
// a client picks (a cost, a dynamic limit) cannot grow it.
func numArg(n int64) any { return cachedNum(n).v }

// numStr is n as an argument of the rueidis path, from the same table.
func numStr(n int64) string { return cachedNum(n).s }

func cachedNum(n int64) *boxedNum {
	slot := &numArgs[uint64(n*-7046029254386353131)>>(64-numArgBits)]
	if a := slot.Load(); a != nil && a.n == n {
		return a
	}
	s := strconv.FormatInt(n, 10)
	a := &boxedNum{n: n, s: s, v: s}
	slot.Store(a)
	return a
}

const numArgBits = 8

var numArgs [1 << numArgBits]atomic.Pointer[boxedNum]

type boxedNum struct {
	n int64
	s string
	v any // s, boxed
}

// appendNumArgs appends op's code and numeric fields (see fieldsOf) to args
// as the go-redis path passes them.
func appendNumArgs(args []any, code int, op *ratelimit.Op) []any {
	args = append(args, opCodeArgs[code])
	f, n, frac := fieldsOf(code, op)
	for _, v := range f[:n] {
		args = append(args, numArg(v))
	}
	if frac {
		args = append(args, strconv.FormatFloat(op.Cost, 'g', -1, 64))
	}
	if isFullBucketForm(code) {
		ms, fr := fullBucket(op)
		args = append(args, numArg(ms), fr.v)
	}
	return args
}

// isFullBucketForm reports whether code (an index in opCodes) is a token
// bucket's short form without a ban, whose fields end with what a full bucket
// becomes (see fullBucket).
func isFullBucketForm(code int) bool { return code == 38 || code == 39 }

// fullBucket returns what the key of op, a token bucket, becomes when op
// passes on a full bucket: its TTL in milliseconds, ceil(cost × t) and at
// least 1, where t = period_ms / limit is the time of a token, and the
// fraction of a millisecond that TTL was rounded up by, the key's value. It
// computes them as evaluate.lua does, in float64, so the script need not:
// Redis 7.0 formats a number that a script passes to a command with
// "%.17g", which costs it more than a command (docs/design.md). The
// fraction is cached as numbers are, by limit, period and cost.
func fullBucket(op *ratelimit.Op) (int64, *boxedFrac) {
	limit, period, cost := op.Limit, millis(op.Period), int64(op.Cost)
	h := (uint64(limit)*0x9E3779B97F4A7C15 ^ uint64(period)) * 0xBF58476D1CE4E5B9
	slot := &fracArgs[(h^uint64(cost))*0x94D049BB133111EB>>(64-numArgBits)]
	if a := slot.Load(); a != nil && a.limit == limit && a.period == period && a.cost == cost {
		return a.ms, a
	}
	ttl := float64(cost) * (float64(period) / float64(limit))
	// At most 2^53 ms (285,000 years), as the script keeps a bucket: Redis
	// refuses a PX Lua formats with an exponent, and int64 would overflow.
	ttl = math.Min(ttl, maxBucketMillis)
	ms := math.Max(math.Ceil(ttl), 1)
	s := "0"
	if f := ms - ttl; f != 0 {
		s = strconv.FormatFloat(f, 'g', -1, 64)
	}
	a := &boxedFrac{limit: limit, period: period, cost: cost, ms: int64(ms), s: s, v: s}
	slot.Store(a)
	return a.ms, a
}

var fracArgs [1 << numArgBits]atomic.Pointer[boxedFrac]

type boxedFrac struct {
	limit, period, cost, ms int64
	s                       string
	v                       any // s, boxed
}
