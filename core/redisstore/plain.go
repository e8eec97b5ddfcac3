package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	ratelimit "github.com/ratekit/ratekit/core"
)

// The plain form of a check on a Store from Dial or Open: per op, INCRBY,
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

// combined returns the replies of cmds, sent with the plain-form commands of
// concurrent checks (see combiner): through the store's combiner, or on a
// Cluster the one of the master that cmds are for. Only plain forms go this
// way: combining script calls measured slower (doc.go, "Pipelining").
func (s *Store) combined(ctx context.Context, c rueidis.Client, cmds rueidis.Commands) ([]rueidis.RedisResult, error) {
	if s.sharding == single {
		return s.dialed.combine.doMulti(ctx, c, cmds)
	}
	return s.dialed.nodes.doMulti(ctx, c, cmds)
}

// evalPlain is evalDialed in the plain form: ops satisfy plainOps. Each op's
// three commands are on one key, so rueidis sends them to one server, in
// order, on one connection.
func (s *Store) evalPlain(ctx context.Context, c rueidis.Client, ops []ratelimit.Op, out []ratelimit.OpResult) ([]ratelimit.OpResult, error) {
	buf := getCommands()
	cmds := s.appendPlain((*buf)[:0], c, ops)
	res, err := s.combined(ctx, c, cmds)
	putCommands(buf, cmds, res, err)
	if err != nil {
		return nil, fmt.Errorf("redisstore: eval: %w", err)
	}
	refused, err := s.decodePlain(ctx, c, ops, res, out, nil)
	if err != nil {
		return nil, err
	}
	if refused != nil {
		return s.evalRefused(ctx, c, ops, refused, out)
	}
	return out, nil
}

// appendPlain appends the plain-form commands of ops to cmds: INCRBY,
// PEXPIRE NX and PTTL per op.
func (s *Store) appendPlain(cmds rueidis.Commands, c rueidis.Client, ops []ratelimit.Op) rueidis.Commands {
	for i := range ops {
		op := &ops[i]
		// Arbitrary takes the numbers as strings, which numStr keeps: the
		// typed builders format each number afresh.
		cmds = append(cmds, c.B().Arbitrary("INCRBY").Keys(op.Key).Args(numStr(int64(op.Cost))).Build()) // whole: short
		if s.sharding == single {
			// Keys computes the key's Cluster slot (a CRC16 of its hash tag),
			// which on one server only picks the connection of a DoMulti by its
			// first command: the key goes as a plain argument after the
			// INCRBY. With 64 callers (a CPU profile of bench's redis_1limit
			// ratekit_1rule_conn) that took the slots from 10% of the
			// client's samples to 2%, and 2-8% more checks/s in 3 runs.
			cmds = append(cmds,
				c.B().Arbitrary("PEXPIRE").Args(op.Key, numStr(millis(op.Period)), "NX").Build(),
				c.B().Arbitrary("PTTL").Args(op.Key).Build())
			continue
		}
		cmds = append(cmds,
			c.B().Arbitrary("PEXPIRE").Keys(op.Key).Args(numStr(millis(op.Period)), "NX").Build(),
			c.B().Pttl().Key(op.Key).Build())
	}
	return cmds
}

// decodePlain fills out from res, the replies of appendPlain's commands for
// ops, and appends to refused the index of every op whose INCRBY was refused
// (which wrote nothing): the script must evaluate those.
func (s *Store) decodePlain(ctx context.Context, c rueidis.Client, ops []ratelimit.Op, res []rueidis.RedisResult, out []ratelimit.OpResult, refused []int) ([]int, error) {
	for j := range ops {
		op := &ops[j]
		count, err := res[3*j].ToInt64()
		if err != nil {
			if _, ok := rueidis.IsRedisErr(err); !ok {
				return nil, fmt.Errorf("redisstore: eval: %w", err)
			}
			refused = append(refused, j) // a fractional or foreign value: nothing was written
			continue
		}
		ttl, err := res[3*j+2].ToInt64()
		if err != nil {
			return nil, fmt.Errorf("redisstore: eval: op %d: %w", j, err)
		}
		if err := res[3*j+1].Error(); err != nil {
			if _, ok := rueidis.IsRedisErr(err); !ok {
				return nil, fmt.Errorf("redisstore: eval: %w", err)
			}
			s.dialed.noPlain.Store(true) // no NX before Redis 7.0
			if ttl == -1 {
				if err := startWindow(ctx, c, op); err != nil {
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
		if count > op.Limit {
			bits = bitExceeded
		}
		out[j] = outcome(&ops[j], float64(count), ttl, bits)
	}
	return refused, nil
}

// evalRefused evaluates with the script the ops whose INCRBY was refused,
// which charged nothing. Only the last op may be terminal, so evaluating them
// after the others changes no outcome.
func (s *Store) evalRefused(ctx context.Context, c rueidis.Client, ops []ratelimit.Op, refused []int, out []ratelimit.OpResult) ([]ratelimit.OpResult, error) {
	groups := [][]int{refused}
	if s.sharding != single { // one script per slot
		groups = s.group(len(refused), func(i int) string { return ops[refused[i]].Key })
		for _, g := range groups {
			for i := range g {
				g[i] = refused[g[i]]
			}
		}
	}
	if err := s.evalScripts(ctx, c, ratelimit.ModeCheck, ops, groups, out); err != nil {
		return nil, err
	}
	return out, nil
}

// startWindowLua sets the TTL of a counter that has none, as PEXPIRE NX does
// from Redis 7.0 on. It is sent as EVAL: it runs at most once per Store, and
// EVAL cannot fail with NOSCRIPT.
const startWindowLua = "if redis.call('PTTL', KEYS[1]) == -1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end"

// startWindow sets the window of op's counter, which its first write left
// without a TTL on a server that refused PEXPIRE NX.
func startWindow(ctx context.Context, c rueidis.Client, op *ratelimit.Op) error {
	cmd := c.B().Eval().Script(startWindowLua).Numkeys(1).Key(op.Key).Arg(strconv.FormatInt(millis(op.Period), 10)).Build()
	if err := c.Do(ctx, cmd).Error(); err != nil && !rueidis.IsRedisNil(err) {
		return fmt.Errorf("redisstore: eval: start the window of %s: %w", op.Key, err)
	}
	return nil
}
