package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

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
	sent := s.dialed.windows.now()
	cmds := s.appendPlain((*buf)[:0], c, ops, out, sent)
	res, err := s.combined(ctx, c, cmds)
	putCommands(buf, cmds, res, err)
	if err != nil {
		return nil, fmt.Errorf("redisstore: eval: %w", err)
	}
	refused, err := s.decodePlain(ctx, c, ops, res, out, sent, nil)
	if err != nil {
		return nil, err
	}
	if refused != nil {
		return s.evalRefused(ctx, c, ops, refused, out)
	}
	return out, nil
}

// appendPlain appends the plain-form commands of ops to cmds: per op INCRBY,
// then PEXPIRE NX and PTTL unless the Store remembers that the op's window
// is on (windows) at sent, a time from s.dialed.windows.now(). Until
// decodePlain reads it, out[i].TTL holds the ms left in op i's remembered
// window (0: sent in full), which says how many replies are the op's.
func (s *Store) appendPlain(cmds rueidis.Commands, c rueidis.Client, ops []ratelimit.Op, out []ratelimit.OpResult, sent int64) rueidis.Commands {
	for i := range ops {
		op := &ops[i]
		// Arbitrary takes the numbers as strings, which numStr keeps: the
		// typed builders format each number afresh.
		cmds = append(cmds, c.B().Arbitrary("INCRBY").Keys(op.Key).Args(numStr(int64(op.Cost))).Build()) // whole: short
		left := s.dialed.windows.left(op.Key, sent)
		out[i] = ratelimit.OpResult{TTL: time.Duration(left)}
		if left > 0 {
			continue
		}
		cmds = appendWindow(cmds, c, s.sharding, op)
	}
	return cmds
}

// appendWindow appends PEXPIRE NX and PTTL of op's counter: its window
// starts if it has none, and its TTL is read.
func appendWindow(cmds rueidis.Commands, c rueidis.Client, sh sharding, op *ratelimit.Op) rueidis.Commands {
	if sh == single {
		// Keys computes the key's Cluster slot (a CRC16 of its hash tag),
		// which on one server only picks the connection of a DoMulti by its
		// first command: the key goes as a plain argument after the
		// INCRBY. With 64 callers (a CPU profile of bench's redis_1limit
		// ratekit_1rule_conn) that took the slots from 10% of the
		// client's samples to 2%, and 2-8% more checks/s in 3 runs.
		return append(cmds,
			c.B().Arbitrary("PEXPIRE").Args(op.Key, numStr(millis(op.Period)), "NX").Build(),
			c.B().Arbitrary("PTTL").Args(op.Key).Build())
	}
	return append(cmds,
		c.B().Arbitrary("PEXPIRE").Keys(op.Key).Args(numStr(millis(op.Period)), "NX").Build(),
		c.B().Pttl().Key(op.Key).Build())
}

// decodePlain fills out from res, the replies of appendPlain's commands for
// ops sent at sent (res may go on with other checks' replies), and appends
// to refused the index of every op whose INCRBY was refused (which wrote
// nothing): the script must evaluate those.
func (s *Store) decodePlain(ctx context.Context, c rueidis.Client, ops []ratelimit.Op, res []rueidis.RedisResult, out []ratelimit.OpResult, sent int64, refused []int) ([]int, error) {
	at := 0
	var made []int // ops whose key INCRBY made anew (startWindows)
	for j := range ops {
		op := &ops[j]
		left := int64(out[j].TTL) // appendPlain's
		r := res[at : at+1]
		if left == 0 {
			r = res[at : at+3]
		}
		at += len(r)
		count, err := r[0].ToInt64()
		if err != nil {
			if _, ok := rueidis.IsRedisErr(err); !ok {
				return nil, fmt.Errorf("redisstore: eval: %w", err)
			}
			// A fractional or foreign value: nothing was written. The script
			// evaluates the op, in full: its next INCRBY would be refused too.
			s.dialed.windows.forget(op.Key)
			refused = append(refused, j)
			continue
		}
		ttl := left
		switch {
		case left == 0:
			if ttl, err = s.windowTTL(ctx, c, op, r[1], r[2], sent); err != nil {
				return nil, err
			}
		case count <= int64(op.Cost):
			// The key was gone (deleted, evicted) before the window this
			// Store remembered ended, and INCRBY made it anew, without a
			// TTL: startWindows starts it, a round trip more (and should
			// that fail, the next check sends the full form).
			made = append(made, j)
		}
		out[j] = counterOutcome(op, count, ttl)
	}
	if made != nil {
		if err := s.startWindows(ctx, c, ops, made, out); err != nil {
			return nil, err
		}
	}
	return refused, nil
}

// counterOutcome is the outcome of op, a counter in the short form, from its
// count after INCRBY and the ms left in its window: exceeded past the limit,
// and then banned for ban_ms when op has a ban, as the script decides.
func counterOutcome(op *ratelimit.Op, count, ttl int64) ratelimit.OpResult {
	var bits int64
	if count > op.Limit {
		bits = bitExceeded
		if banFor := millis(op.BanFor); op.BanKey != "" && banFor != 0 {
			ttl, bits = banFor, bitExceeded|bitBanned
		}
	}
	return outcome(op, float64(count), ttl, bits)
}

// startWindows starts the windows of the ops at made, whose keys INCRBY made
// anew in a window the Store remembered, and reads their TTLs into out (but
// a ban's, which stays), in one round trip.
func (s *Store) startWindows(ctx context.Context, c rueidis.Client, ops []ratelimit.Op, made []int, out []ratelimit.OpResult) error {
	now := s.dialed.windows.now()
	cmds := make(rueidis.Commands, 0, 2*len(made))
	for _, i := range made {
		s.dialed.windows.forget(ops[i].Key)
		cmds = appendWindow(cmds, c, s.sharding, &ops[i])
	}
	res := c.DoMulti(ctx, cmds...)
	for k, i := range made {
		ttl, err := s.windowTTL(ctx, c, &ops[i], res[2*k], res[2*k+1], now)
		if err != nil {
			return err
		}
		if !out[i].Banned {
			out[i].TTL = ttlOf(ttl)
		}
	}
	return nil
}

// windowTTL returns the ms left in op's window from the replies of
// appendWindow's commands, sent at sent, and remembers when it ends.
func (s *Store) windowTTL(ctx context.Context, c rueidis.Client, op *ratelimit.Op, expire, pttl rueidis.RedisResult, sent int64) (int64, error) {
	ttl, err := pttl.ToInt64()
	if err != nil {
		return 0, fmt.Errorf("redisstore: eval: %s: %w", op.Key, err)
	}
	if err := expire.Error(); err != nil {
		if _, ok := rueidis.IsRedisErr(err); !ok {
			return 0, fmt.Errorf("redisstore: eval: %w", err)
		}
		s.dialed.noPlain.Store(true) // no NX before Redis 7.0
		if ttl == -1 {
			if err := startWindow(ctx, c, op); err != nil {
				return 0, err
			}
		}
	}
	switch {
	case ttl == -1: // the window just started
		ttl = millis(op.Period)
	case ttl < 0: // the window ended between the commands
		ttl = 0
	}
	s.dialed.windows.remember(op.Key, sent, ttl)
	return ttl, nil
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
