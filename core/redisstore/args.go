package redisstore

import (
	"math"
	"strconv"
	"sync/atomic"

	ratelimit "github.com/ratekit/ratekit/core"
)

// The KEYS and ARGV of evaluate.lua, shared by the go-redis path (which needs
// []any arguments) and the pipelined connection (which writes RESP directly),
// so that both send the very same bytes for the same ops. evaluate.lua's
// header describes the layout.

// maxShortCost is the largest cost the short form takes: every whole float64
// up to it prints exactly as an integer.
const maxShortCost = 1 << 53

// short reports whether op takes the script's short form: a counter charged
// with a whole positive cost, without a ban, in a check. It is the usual op,
// and the short form spares the script most of its work.
func short(mode ratelimit.Mode, op *ratelimit.Op) bool {
	if mode != ratelimit.ModeCheck || op.Kind != ratelimit.OpCount || op.BanKey != "" {
		return false
	}
	c, ok := wholeCost(op.Cost)
	return ok && c > 0
}

// shortBan reports whether op takes the script's short form with a ban: a
// counter charged with a whole positive cost, with a ban, in a check.
func shortBan(mode ratelimit.Mode, op *ratelimit.Op) bool {
	if mode != ratelimit.ModeCheck || op.Kind != ratelimit.OpCount || op.BanKey == "" {
		return false
	}
	c, ok := wholeCost(op.Cost)
	return ok && c > 0
}

// opCodes are the codes of ARGV: the general form's "g<kind><flags><peek>",
// indexed by kind*8 + flags*2 + peek, then the short forms' "n" and "t"
// (without a ban) and "b" and "B" (with one), each non-terminal, terminal.
var opCodes = [36]string{
	"g000", "g001", "g010", "g011", "g020", "g021", "g030", "g031",
	"g100", "g101", "g110", "g111", "g120", "g121", "g130", "g131",
	"g200", "g201", "g210", "g211", "g220", "g221", "g230", "g231",
	"g300", "g301", "g310", "g311", "g320", "g321", "g330", "g331",
	"n", "t", "b", "B",
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
	i := int(op.Kind&3) * 8
	if op.Terminal {
		i += 2
	}
	if op.BanKey != "" {
		i += 4
	}
	if mode == ratelimit.ModePeek {
		i++
	}
	return i
}

// keyCount is the number of KEYS of op: its key, and its ban key if any.
func keyCount(op *ratelimit.Op) int {
	if op.BanKey == "" {
		return 1
	}
	return 2
}

// evalShape is the size of the evaluate.lua command for some ops: its
// length (name, hash and key count included), its number of KEYS, and its
// string arguments (keys and members): how many, and their total length.
type evalShape struct{ nargs, nkeys, nstrs, size int }

func evalShapeOf(mode ratelimit.Mode, ops []ratelimit.Op) evalShape {
	sh := evalShape{nargs: 3}
	for i := range ops {
		op := &ops[i]
		k := keyCount(op)
		code := opCode(mode, op)
		sh.nargs += k + argCount(code)
		sh.nkeys += k
		sh.nstrs += k
		sh.size += len(op.Key) + len(op.BanKey)
		if !isShort(code) {
			sh.nstrs++
			sh.size += len(op.Member)
		}
	}
	return sh
}

// isShort reports whether code (an index in opCodes) is of the short form.
func isShort(code int) bool { return code >= 32 }

// argCount is the number of ARGV of an op whose code is code: the code, the
// fields (see fieldsOf) and, in the general form, the member (a token
// bucket's burst in its place).
func argCount(code int) int {
	switch {
	case code >= 34: // with a ban
		return 1 + 4
	case isShort(code):
		return 1 + 3
	}
	return 1 + 4 + 1
}

// fieldsOf returns op's numeric fields as integers: limit, period_ms and,
// in the general form and the short form with a ban, ban_ms, then the cost,
// which the short forms always have whole. A general form's cost that is not whole is not among them (fracCost):
// it follows them as a float. The general form's member comes after all.
func fieldsOf(code int, op *ratelimit.Op) (f [4]int64, n int, fracCost bool) {
	f[0], f[1] = op.Limit, millis(op.Period)
	switch {
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
func numArg(n int64) any {
	slot := &numArgs[uint64(n*-7046029254386353131)>>(64-numArgBits)]
	if a := slot.Load(); a != nil && a.n == n {
		return a.v
	}
	a := &boxedNum{n: n, v: strconv.FormatInt(n, 10)}
	slot.Store(a)
	return a.v
}

const numArgBits = 8

var numArgs [1 << numArgBits]atomic.Pointer[boxedNum]

type boxedNum struct {
	n int64
	v any
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
	return args
}

// RESP encoding of commands, appended to a caller's buffer: nothing is boxed
// and nothing allocates once the buffer has grown to the usual size.

func appendArrayHeader(dst []byte, n int) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, '\r', '\n')
}

func appendBulk(dst []byte, s string) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, s...)
	return append(dst, '\r', '\n')
}

func appendBulkBytes(dst, b []byte) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(b)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, b...)
	return append(dst, '\r', '\n')
}

// appendEval appends the whole evaluate.lua call for ops to dst as RESP:
// EVALSHA <sha> (or EVAL <source> when eval is set), the key count, KEYS and
// ARGV exactly as the go-redis path sends them (evalCmd).
func appendEval(dst []byte, eval bool, mode ratelimit.Mode, ops []ratelimit.Op) []byte {
	sh := evalShapeOf(mode, ops)
	dst = appendArrayHeader(dst, sh.nargs)
	if eval {
		dst = appendBulk(dst, "EVAL")
		dst = appendBulk(dst, evaluateLua)
	} else {
		dst = appendBulk(dst, "EVALSHA")
		dst = appendBulk(dst, evaluateHash)
	}
	var tmp [32]byte // one number: an int64, or a float64 as 'g' prints it
	dst = appendBulkBytes(dst, strconv.AppendInt(tmp[:0], int64(sh.nkeys), 10))
	for i := range ops {
		dst = appendBulk(dst, ops[i].Key)
		if ops[i].BanKey != "" {
			dst = appendBulk(dst, ops[i].BanKey)
		}
	}
	for i := range ops {
		op := &ops[i]
		code := opCode(mode, op)
		dst = appendBulk(dst, opCodes[code])
		f, n, frac := fieldsOf(code, op)
		for _, v := range f[:n] {
			dst = appendBulkBytes(dst, strconv.AppendInt(tmp[:0], v, 10))
		}
		if frac {
			dst = appendBulkBytes(dst, strconv.AppendFloat(tmp[:0], op.Cost, 'g', -1, 64))
		}
		if !isShort(code) {
			if op.Kind == ratelimit.OpTokenBucket {
				dst = appendBulkBytes(dst, strconv.AppendInt(tmp[:0], op.Burst, 10))
				continue
			}
			dst = appendBulk(dst, op.Member)
		}
	}
	return dst
}
