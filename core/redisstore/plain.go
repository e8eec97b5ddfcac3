package redisstore

import (
	"context"
	"fmt"
	"strconv"

	ratelimit "github.com/ratekit/ratekit/core"
)

// The plain form of a check on the pipelined connections: per op, INCRBY,
// PEXPIRE NX and PTTL, written together, instead of the script. It serves the
// checks that need nothing only the script gives: every op a counter charged
// with a whole cost, without a ban (the script's short form), and no op but
// the last terminal, so that no exceeded op could have stopped a later one.
// That is the usual check, and Redis spends well under half the time on it
// that it spends on EVALSHA, whose own work (finding the script, building
// KEYS and ARGV, the Lua calls) outweighs the commands it runs.
//
// The outcome is the short form's: INCRBY counts, PEXPIRE NX starts the
// window on the counter's first write and never extends it, PTTL is the time
// left. Redis runs the commands of one client's write one after the other, so
// no other client's command comes between them in practice; even if one did,
// each command keeps the counter and its window right on its own. Two cases
// take the script after all:
//
//   - INCRBY refuses a counter holding a fractional count (left by an earlier
//     fractional cost) or a value of another type, and writes nothing: that op
//     is evaluated again by the script, in a second round trip.
//   - A server before Redis 7.0 refuses PEXPIRE's NX: the window is then set
//     by a second command (startWindow), and the Store sends every later
//     check as the script.

// plainOps reports whether a check of ops takes the plain form.
func plainOps(mode ratelimit.Mode, ops []ratelimit.Op) bool {
	for i := range ops {
		if !short(mode, &ops[i]) || (ops[i].Terminal && i != len(ops)-1) {
			return false
		}
	}
	return true
}

// plainReplies is the number of replies of an op's commands in the plain form.
const plainReplies = 3

// appendPlain appends the commands of the plain form of ops, for each op in
// order: INCRBY key cost, PEXPIRE key period NX, PTTL key.
func appendPlain(dst []byte, ops []ratelimit.Op) []byte {
	var tmp [24]byte
	for i := range ops {
		op := &ops[i]
		dst = append(dst, "*3\r\n$6\r\nINCRBY\r\n"...)
		dst = appendBulk(dst, op.Key)
		dst = appendBulkBytes(dst, strconv.AppendInt(tmp[:0], int64(op.Cost), 10)) // whole: short
		dst = append(dst, "*4\r\n$7\r\nPEXPIRE\r\n"...)
		dst = appendBulk(dst, op.Key)
		dst = appendBulkBytes(dst, strconv.AppendInt(tmp[:0], millis(op.Period), 10))
		dst = append(dst, "$2\r\nNX\r\n*2\r\n$4\r\nPTTL\r\n"...)
		dst = appendBulk(dst, op.Key)
	}
	return dst
}

// evalPlain is evalConn in the plain form: ops satisfy plainOps.
func (s *Store) evalPlain(ctx context.Context, ops []ratelimit.Op, out []ratelimit.OpResult) ([]ratelimit.OpResult, error) {
	r := getRequest()
	r.cmd = appendPlain(r.cmd[:0], ops)
	r.replies = plainReplies * len(ops)
	abandoned, err := s.pool.call(ctx, r)
	if !abandoned {
		defer putRequest(r)
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: eval: %w", err)
	}
	if len(r.vals) != plainReplies*len(ops) {
		return nil, fmt.Errorf("redisstore: eval: %d replies for %d ops", len(r.vals), len(ops))
	}
	var refused []int
	for j := range ops {
		op := &ops[j]
		count, expire, pttl := r.vals[plainReplies*j], r.vals[plainReplies*j+1], r.vals[plainReplies*j+2]
		if count.kind == '-' { // a fractional or foreign value: nothing was written
			refused = append(refused, j)
			continue
		}
		if count.kind != ':' || pttl.kind != ':' {
			return nil, fmt.Errorf("redisstore: eval: op %d: unexpected reply types %q %q", j, count.kind, pttl.kind)
		}
		ttl := pttl.n
		if expire.kind == '-' { // no NX before Redis 7.0
			s.noPlain.Store(true)
			if ttl == -1 {
				if err := s.startWindow(ctx, op); err != nil {
					return nil, err
				}
			}
		}
		switch {
		case ttl == -1: // the window just started
			ttl = millis(op.Period)
		case ttl < 0: // the window ended between the commands
			ttl = 0
		}
		var bits int64
		if count.n > op.Limit {
			bits = bitExceeded
		}
		out[j] = outcome(float64(count.n), ttl, bits)
	}
	if refused != nil {
		return s.evalRefused(ctx, ops, refused, out)
	}
	return out, nil
}

// evalRefused evaluates with the script the ops whose INCRBY was refused,
// which charged nothing. Only the last op may be terminal, so evaluating them
// after the others changes no outcome.
func (s *Store) evalRefused(ctx context.Context, ops []ratelimit.Op, refused []int, out []ratelimit.OpResult) ([]ratelimit.OpResult, error) {
	sub := make([]ratelimit.Op, len(refused))
	for i, j := range refused {
		sub[i] = ops[j]
	}
	res, err := s.evalScript(ctx, ratelimit.ModeCheck, sub, make([]ratelimit.OpResult, len(sub)))
	if err != nil {
		return nil, err
	}
	for i, j := range refused {
		out[j] = res[i]
	}
	return out, nil
}

// startWindowLua sets the TTL of a counter that has none, as PEXPIRE NX does
// from Redis 7.0 on. It is sent as EVAL: it runs at most once per Store, and
// EVAL cannot fail with NOSCRIPT.
const startWindowLua = "if redis.call('PTTL', KEYS[1]) == -1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end"

// startWindow sets the window of op's counter, which its first write left
// without a TTL on a server that refused PEXPIRE NX.
func (s *Store) startWindow(ctx context.Context, op *ratelimit.Op) error {
	r := getRequest()
	var tmp [24]byte
	r.cmd = appendArrayHeader(r.cmd[:0], 5)
	r.cmd = appendBulk(r.cmd, "EVAL")
	r.cmd = appendBulk(r.cmd, startWindowLua)
	r.cmd = appendBulk(r.cmd, "1")
	r.cmd = appendBulk(r.cmd, op.Key)
	r.cmd = appendBulkBytes(r.cmd, strconv.AppendInt(tmp[:0], millis(op.Period), 10))
	abandoned, err := s.pool.call(ctx, r)
	if !abandoned {
		defer putRequest(r)
	}
	if err != nil {
		return fmt.Errorf("redisstore: eval: start the window of %s: %w", op.Key, err)
	}
	return nil
}
