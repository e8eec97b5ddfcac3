package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/rueidis"

	ratelimit "github.com/ratekit/ratekit/core"
)

var _ ratelimit.BatchStore = (*Store)(nil)

// EvalBatch implements ratelimit.BatchStore: the checks of batch, each
// applied as Eval would apply it, check after check, in as few round trips as
// that order allows (see Batches in the package documentation).
//
// On a Store from Dial or Open every check's first stage goes out in one
// DoMulti: on one server (standalone or Sentinel) that is the whole batch in
// one round trip, each check in its plain form or as one script call. On a
// Cluster a check whose limit rule is followed by a rule of another slot
// takes several stages, as in Eval; the batch sends stage after stage, each
// round trip carrying the next stage of every check still running, so a
// batch costs as many round trips as its longest check. A block ends its
// own check only, and so does a failure: a master that does not answer by
// the deadline fails the checks with a key on it, and the error is a
// *ratelimit.BatchError naming them.
//
// On a Store from New the batch is one pipeline of script calls when the
// client is a single server's; otherwise the checks are evaluated one after
// another, each failing on its own.
func (s *Store) EvalBatch(ctx context.Context, mode ratelimit.Mode, batch [][]ratelimit.Op) ([][]ratelimit.OpResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := 0
	for e, ops := range batch {
		if err := ratelimit.CheckCosts(ops); err != nil {
			return nil, fmt.Errorf("redisstore: check %d: %w", e, err)
		}
		n += len(ops)
	}
	all := make([]ratelimit.OpResult, n) // one allocation for every check's outcomes
	outs := make([][]ratelimit.OpResult, len(batch))
	for e, ops := range batch {
		outs[e], all = all[:len(ops):len(ops)], all[len(ops):]
	}
	var err error
	switch {
	case s.dialed != nil:
		err = s.batchDialed(ctx, mode, batch, outs)
	case s.shardingNow() == single && !s.learn:
		err = s.batchPipelined(ctx, mode, batch, outs)
	default: // a cluster or a client of unknown kind through go-redis: check by check
		var errs []error
		for e, ops := range batch {
			eerr := ctx.Err() // once the deadline passed, the rest fail unsent
			if eerr == nil {
				outs[e], eerr = s.Eval(ctx, mode, ops)
			}
			if eerr != nil {
				if errs == nil {
					errs = make([]error, len(batch))
				}
				errs[e] = eerr
			}
		}
		if errs != nil {
			err = &ratelimit.BatchError{Errs: errs}
		}
	}
	if be := (*ratelimit.BatchError)(nil); errors.As(err, &be) {
		return outs, err // the checks that did not fail stand
	}
	if err != nil {
		return nil, err
	}
	return outs, nil
}

// batchPipelined is EvalBatch on a single server through go-redis: one
// script call per check, in one pipeline, which the server runs in order.
func (s *Store) batchPipelined(ctx context.Context, mode ratelimit.Mode, batch [][]ratelimit.Op, outs [][]ratelimit.OpResult) error {
	calls := make([]scriptCall, 0, len(batch))
	for _, ops := range batch {
		if len(ops) > 0 {
			c := scriptCall{mode: mode, ops: ops}
			c.keys, c.args = evalArgs(mode, ops, nil)
			calls = append(calls, c)
		}
	}
	if len(calls) == 0 {
		return nil
	}
	cmds, err := s.runPipelined(ctx, s.evaluate, calls)
	if err != nil {
		return fmt.Errorf("redisstore: eval: %w", err)
	}
	i := 0
	for e, ops := range batch {
		if len(ops) == 0 {
			continue
		}
		res, err := cmds[i].Result()
		if err != nil {
			return fmt.Errorf("redisstore: eval: %w", err)
		}
		if err := decode(res, ops, outs[e], nil); err != nil {
			return err
		}
		i++
	}
	return nil
}

// batchCheck is one check of a batch on a Store from Dial or Open.
type batchCheck struct {
	elem   int // its index in the batch
	err    error
	ops    []ratelimit.Op
	out    []ratelimit.OpResult
	plain  bool    // sent in the plain form (one stage)
	shards []shard // a multi-stage Cluster check: the shard of each op
	next   int     // the first op not sent yet
	end    int     // the end of the stage in flight
}

// evalCall is one evaluate.lua call of a round trip: check's ops[idx] (all
// when idx is nil), sent as cmds[at].
type evalCall struct {
	check *batchCheck
	idx   []int
	at    int
}

// batchDialed is EvalBatch on a Store from Dial or Open. Each round trip
// carries the next stage of every check still running, in batch order, with
// one exception that keeps the order of writes that of consecutive checks: a
// stage that touches a key which an earlier check has still to write (in a
// later stage) waits for a later round trip. Commands on one key go to one
// server, in order, on one connection, so within a round trip a later
// check's commands on a key run after an earlier one's.
//
// A reply that is an error (a Cluster master that did not answer by the
// deadline) fails its own check, whose later stages are not sent, and the
// other checks go on: the error returned is then a *ratelimit.BatchError.
func (s *Store) batchDialed(ctx context.Context, mode ratelimit.Mode, batch [][]ratelimit.Op, outs [][]ratelimit.OpResult) (err error) {
	c, err := s.dialed.get()
	if err != nil {
		return err
	}
	s.dialed.tries.note(ctx)
	defer func() {
		if err != nil {
			s.dialed.failed(c, err)
			err = withDeadline(ctx, err)
		}
	}()
	checks, err := s.planBatch(mode, batch, outs)
	if err != nil {
		return err
	}
	failed := 0
	fail := func(ch *batchCheck, err error) {
		if ch.err == nil {
			ch.err, failed = err, failed+1
		}
	}
	// Sized at once for the plain form (3 commands an op, and a check's
	// index and start each): grown by append, they cost an Envoy request of
	// 5 descriptors 6 more allocations.
	nops := 0
	for i := range checks {
		nops += len(checks[i].ops)
	}
	idx := make([]int, 2*len(checks))
	var (
		cmds    = make(rueidis.Commands, 0, 3*nops)
		calls   []evalCall
		plains  = idx[:0:len(checks)] // the checks sent in the plain form this round trip, by index
		at      = idx[len(checks):]   // where each one's commands start in cmds
		pending map[string]struct{}   // keys that earlier checks have still to write
	)
	for left := len(checks); left > 0; {
		cmds, calls, plains, at = cmds[:0], calls[:0], plains[:0], at[:0]
		sent := s.dialed.windows.now()
		clear(pending)
		for i := range checks {
			ch := &checks[i]
			if ch.next == len(ch.ops) {
				continue
			}
			end, groups := s.nextStage(mode, ch)
			if waits(pending, ch.ops[ch.next:end]) {
				pending = addKeys(pending, ch.ops[ch.next:])
				continue
			}
			ch.end = end
			if ch.plain {
				plains, at = append(plains, i), append(at, len(cmds))
				cmds = s.appendPlain(cmds, c, ch.ops, ch.out, sent)
			} else {
				for _, idx := range groups {
					calls = append(calls, evalCall{check: ch, idx: idx, at: len(cmds)})
					cmds = append(cmds, evalCommand(c, false, mode, ch.ops, idx, nil))
				}
			}
			if end < len(ch.ops) {
				pending = addKeys(pending, ch.ops[end:])
			}
		}
		var res []rueidis.RedisResult
		if len(calls) == 0 && len(cmds) > 0 { // plain forms only, combined as a single check's are
			if res, err = s.combined(ctx, c, cmds); err != nil {
				return fmt.Errorf("redisstore: eval: %w", err)
			}
		} else {
			res = doEvals(ctx, c, mode, cmds, calls)
		}
		var refused []evalCall
		for j, i := range plains {
			ch := &checks[i]
			r, err := s.decodePlain(ctx, c, ch.ops, res[at[j]:], ch.out, sent, nil)
			if err != nil {
				fail(ch, err)
				continue
			}
			refused = s.appendRefused(refused, ch, r)
		}
		for _, call := range calls {
			if call.check.err == nil {
				if err := s.decodeResult(res[call.at], mode, call.check.ops, call.check.out, call.idx, nil, sent, nil); err != nil {
					fail(call.check, err)
				}
			}
		}
		if len(refused) > 0 { // evaluated again by the script, in batch order
			cmds = cmds[:0]
			for i := range refused {
				refused[i].at = len(cmds)
				cmds = append(cmds, evalCommand(c, false, mode, refused[i].check.ops, refused[i].idx, nil))
			}
			res := doEvals(ctx, c, mode, cmds, refused)
			for _, call := range refused {
				if call.check.err == nil {
					if err := s.decodeResult(res[call.at], mode, call.check.ops, call.check.out, call.idx, nil, sent, nil); err != nil {
						fail(call.check, err)
					}
				}
			}
		}
		for i := range checks {
			ch := &checks[i]
			if ch.end == 0 || ch.next == len(ch.ops) {
				continue
			}
			if ch.err != nil || ch.shards != nil && blockedIn(ch.ops, ch.out, ch.next, ch.end) || ch.end == len(ch.ops) {
				ch.next = len(ch.ops)
				left--
			} else {
				ch.next = ch.end
			}
			ch.end = 0
		}
	}
	if failed == 0 {
		return nil
	}
	errs := make([]error, len(batch))
	for i := range checks {
		errs[checks[i].elem] = checks[i].err
	}
	return &ratelimit.BatchError{Errs: errs}
}

// planBatch returns the checks of batch that have ops. They take the plain
// form when every one of them would in Eval: a check's op that INCRBY
// refuses (a fraction, a value of another type) is evaluated again by the
// script in one more round trip, after the other checks of the round trip,
// which is only the order of consecutive checks when none of those could
// have written its key in between (INCRBY refused there too).
func (s *Store) planBatch(mode ratelimit.Mode, batch [][]ratelimit.Op, outs [][]ratelimit.OpResult) ([]batchCheck, error) {
	checks := make([]batchCheck, 0, len(batch))
	plain := !s.dialed.noPlain.Load()
	for e, ops := range batch {
		if len(ops) > 0 {
			checks = append(checks, batchCheck{elem: e, ops: ops, out: outs[e]})
			plain = plain && plainOps(mode, ops)
		}
	}
	for i := range checks {
		ch := &checks[i]
		ch.plain = plain
		if !plain && s.sharding != single && !s.oneShard(ch.ops) {
			var err error
			if ch.shards, err = s.shardsOf(ch.ops); err != nil {
				return nil, err
			}
		}
	}
	return checks, nil
}

// nextStage returns the end of ch's next stage and its script calls' groups
// (none in the plain form; nil for one call on all of ch.ops).
func (s *Store) nextStage(mode ratelimit.Mode, ch *batchCheck) (int, [][]int) {
	switch {
	case ch.plain:
		return len(ch.ops), nil
	case ch.shards == nil: // one server, or one shard: one script
		return len(ch.ops), [][]int{nil}
	}
	end := len(ch.ops)
	if mode == ratelimit.ModeCheck {
		end = stageEnd(ch.ops, ch.shards, ch.next)
	}
	return end, groupShards(ch.shards, ch.next, end)
}

// appendRefused appends to calls the script calls that evaluate again ch's
// ops at refused, whose INCRBY was refused: one call, or one per shard.
func (s *Store) appendRefused(calls []evalCall, ch *batchCheck, refused []int) []evalCall {
	if refused == nil {
		return calls
	}
	if s.sharding == single {
		return append(calls, evalCall{check: ch, idx: refused})
	}
	for _, g := range s.group(len(refused), func(i int) string { return ch.ops[refused[i]].Key }) {
		for i := range g {
			g[i] = refused[g[i]]
		}
		calls = append(calls, evalCall{check: ch, idx: g})
	}
	return calls
}

// doEvals sends cmds in one round trip, calls being its evaluate.lua calls,
// and sends again those that retryEvals mends. Any other error stays in the
// call's result.
func doEvals(ctx context.Context, c rueidis.Client, mode ratelimit.Mode, cmds rueidis.Commands, calls []evalCall) []rueidis.RedisResult {
	if len(cmds) == 0 {
		return nil
	}
	res := c.DoMulti(ctx, cmds...)
	retryEvals(ctx, c, mode, res, len(calls), func(k int) (int, []ratelimit.Op, []int, []ratelimit.OpResult) {
		return calls[k].at, calls[k].check.ops, calls[k].idx, nil
	})
	return res
}

// waits reports whether one of the keys of ops is in keys.
func waits(keys map[string]struct{}, ops []ratelimit.Op) bool {
	if len(keys) == 0 {
		return false
	}
	for i := range ops {
		if _, ok := keys[ops[i].Key]; ok {
			return true
		}
		if _, ok := keys[ops[i].BanKey]; ok && ops[i].BanKey != "" {
			return true
		}
	}
	return false
}

// addKeys adds the keys of ops to keys, which it makes when nil.
func addKeys(keys map[string]struct{}, ops []ratelimit.Op) map[string]struct{} {
	if keys == nil {
		keys = make(map[string]struct{}, len(ops))
	}
	for i := range ops {
		keys[ops[i].Key] = struct{}{}
		if ops[i].BanKey != "" {
			keys[ops[i].BanKey] = struct{}{}
		}
	}
	return keys
}
