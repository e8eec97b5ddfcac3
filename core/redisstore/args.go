package redisstore

import (
	"strconv"

	ratelimit "github.com/ratekit/ratekit/core"
)

// The KEYS and ARGV of evaluate.lua, shared by the go-redis path (which needs
// []any arguments) and the pipelined connection (which writes RESP directly),
// so that both send the very same bytes for the same ops.

// modeArg is ARGV[1] of evaluate.lua.
func modeArg(mode ratelimit.Mode) string {
	if mode == ratelimit.ModePeek {
		return "1"
	}
	return "0"
}

// banKeyOf is op's KEYS entry for its ban: the counter key again when the op
// has no ban, so that the script's KEYS stay two per op.
func banKeyOf(op *ratelimit.Op) string {
	if op.BanKey == "" {
		return op.Key
	}
	return op.BanKey
}

// appendSpec appends op's ARGV spec, "<kind> <flags> <limit> <period_ms>
// <ban_ms> <cost>", to buf.
func appendSpec(buf []byte, op *ratelimit.Op) []byte {
	kind, flags := byte('0'), byte('0')
	if op.Kind == ratelimit.OpDistinct {
		kind = '1'
	}
	if op.Terminal {
		flags++
	}
	if op.BanKey != "" {
		flags += 2
	}
	buf = append(buf, kind, ' ', flags, ' ')
	buf = strconv.AppendInt(buf, op.Limit, 10)
	buf = append(buf, ' ')
	buf = strconv.AppendInt(buf, millis(op.Period), 10)
	buf = append(buf, ' ')
	buf = strconv.AppendInt(buf, millis(op.BanFor), 10)
	buf = append(buf, ' ')
	return strconv.AppendFloat(buf, op.Cost, 'g', -1, 64)
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

// appendSpecBulk appends op's spec as a bulk string, formatted on the stack
// (the longest spec: three int64s, a float64 and separators, under 96 bytes).
func appendSpecBulk(dst []byte, op *ratelimit.Op) []byte {
	var tmp [96]byte
	return appendBulkBytes(dst, appendSpec(tmp[:0], op))
}

// appendEval appends the whole evaluate.lua call for ops to dst as RESP:
// EVALSHA <sha> (or EVAL <source> when eval is set), the key count, KEYS and
// ARGV exactly as the go-redis path sends them (evalCmd).
func appendEval(dst []byte, eval bool, mode ratelimit.Mode, ops []ratelimit.Op) []byte {
	n := len(ops)
	dst = appendArrayHeader(dst, 3+2*n+1+2*n)
	if eval {
		dst = appendBulk(dst, "EVAL")
		dst = appendBulk(dst, evaluateLua)
	} else {
		dst = appendBulk(dst, "EVALSHA")
		dst = appendBulk(dst, evaluateHash)
	}
	var tmp [20]byte
	dst = appendBulkBytes(dst, strconv.AppendInt(tmp[:0], int64(2*n), 10))
	for i := range ops {
		dst = appendBulk(dst, ops[i].Key)
		dst = appendBulk(dst, banKeyOf(&ops[i]))
	}
	dst = appendBulk(dst, modeArg(mode))
	for i := range ops {
		dst = appendSpecBulk(dst, &ops[i])
		dst = appendBulk(dst, ops[i].Member)
	}
	return dst
}
