package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	ratelimit "github.com/ratekit/ratekit/core"
)

// evalSharded runs a check whose keys may live on several cluster nodes, as if
// its ops ran one after another (see doc.go). The ops are cut into stages: a
// stage never holds an op that follows a terminal op of another shard, so each
// stage is one evaluate.lua per shard, all in one pipelined round trip, and a
// block found in a stage ends the check before any later op is charged. A
// check whose terminal ops share one shard with everything after them (the
// usual case: one rule, or rules counting by the same property) takes one
// round trip; a peek, which writes nothing, always takes one.
//
// Each stage is planned (shardsOf, stageEnd, groupShards), run (evalStage),
// then its outcomes are read for a block (blockedIn).
func (s *Store) evalSharded(ctx context.Context, mode ratelimit.Mode, ops []ratelimit.Op, out []ratelimit.OpResult) ([]ratelimit.OpResult, error) {
	if s.oneShard(ops) { // the usual check: one stage of one script, nothing to plan
		return s.evalOne(ctx, mode, ops, out)
	}
	shards, err := s.shardsOf(ops)
	if err != nil {
		return nil, err
	}
	for start := 0; start < len(ops); {
		end := len(ops)
		if mode == ratelimit.ModeCheck {
			end = stageEnd(ops, shards, start)
		}
		if err := s.evalStage(ctx, mode, ops, start, end, shards, out); err != nil {
			return nil, err
		}
		if blockedIn(ops, out, start, end) {
			return out, nil
		}
		start = end
	}
	return out, nil
}

// oneShard reports whether all keys of ops, ban keys included, live on one
// shard: then the check is one stage, and its one group is all of ops.
func (s *Store) oneShard(ops []ratelimit.Op) bool {
	first := s.shardOf(ops[0].Key)
	for i := range ops {
		if i > 0 && s.shardOf(ops[i].Key) != first || ops[i].BanKey != "" && s.shardOf(ops[i].BanKey) != first {
			return false
		}
	}
	return true
}

// shardsOf returns the shard of each op. An op's ban key must share its
// counter key's shard: one script reads and writes both.
func (s *Store) shardsOf(ops []ratelimit.Op) ([]shard, error) {
	shards := make([]shard, len(ops))
	for i := range ops {
		op := &ops[i]
		shards[i] = s.shardOf(op.Key)
		if op.BanKey != "" && s.shardOf(op.BanKey) != shards[i] {
			return nil, fmt.Errorf("redisstore: op %d: counter key %q and ban key %q are on different cluster shards; give them a common {hash tag}",
				i, op.Key, op.BanKey)
		}
	}
	return shards, nil
}

// stageEnd returns the end (exclusive) of the stage that starts at ops[start]:
// it stops before the first op whose shard differs from that of a terminal op
// earlier in the stage, the one op that could be charged past a block.
func stageEnd(ops []ratelimit.Op, shards []shard, start int) int {
	var held [4]shard
	terminal := held[:0] // shards holding a terminal op of this stage
	for i := start; i < len(ops); i++ {
		for _, t := range terminal {
			if t != shards[i] {
				return i
			}
		}
		if ops[i].Terminal && indexOf(terminal, shards[i]) < 0 {
			terminal = append(terminal, shards[i])
		}
	}
	return len(ops)
}

// blockedIn reports whether a terminal op of ops[start:end] was exceeded, the
// end of the check. Sequential semantics: nothing after the first block
// counts, so the outcomes after it are cleared (in a peek, the later shards of
// the stage were read, not written).
func blockedIn(ops []ratelimit.Op, out []ratelimit.OpResult, start, end int) bool {
	for i := start; i < end; i++ {
		if out[i].Evaluated && out[i].Exceeded && ops[i].Terminal {
			clear(out[i+1:])
			return true
		}
	}
	return false
}

// evalStage evaluates the ops of one stage, ops[start:end] of shards
// shards: one script per shard, all in one round trip, each one's reply
// decoded into out. On a Store from Dial a stage that the plain form can
// evaluate (plainOps: as a check of limit rules in different slots is, one
// stage per rule) goes in it, which costs Redis a fraction of the script
// (INCRBY alone in a remembered window).
func (s *Store) evalStage(ctx context.Context, mode ratelimit.Mode, ops []ratelimit.Op, start, end int, shards []shard, out []ratelimit.OpResult) error {
	if s.dialed != nil {
		c, err := s.dialed.get()
		if err != nil {
			return err
		}
		if plainOps(mode, ops[start:end]) && !s.dialed.noPlain.Load() {
			_, err := s.evalPlain(ctx, c, ops[start:end], out[start:end])
			return err
		}
		return s.evalScripts(ctx, c, mode, ops, groupShards(shards, start, end), out)
	}
	groups := groupShards(shards, start, end)
	if len(groups) == 1 { // the usual stage: one script call, no pipeline
		return s.evalGroup(ctx, mode, ops, groups[0], out)
	}
	calls := make([]scriptCall, len(groups))
	for g, idx := range groups {
		calls[g] = scriptCall{mode: mode, ops: ops, idx: idx}
		calls[g].keys, calls[g].args = evalArgs(mode, ops, idx)
	}
	cmds, err := s.runPipelined(ctx, s.evaluate, calls)
	if err != nil {
		return fmt.Errorf("redisstore: eval: %w", err)
	}
	for g, idx := range groups {
		res, err := cmds[g].Result()
		if err != nil {
			return fmt.Errorf("redisstore: eval: %w", err)
		}
		if err := decode(res, ops, out, idx); err != nil {
			return err
		}
	}
	return nil
}

// evalGroup evaluates ops[idx] (all ops when idx is nil), which share a
// shard, in one script call, and decodes the reply into out. go-redis' own
// clients process a prepared command, which routes by its first key as
// Script.Run's does, without Script.Run's copies; other Clients go through
// Script.Run.
func (s *Store) evalGroup(ctx context.Context, mode ratelimit.Mode, ops []ratelimit.Op, idx []int, out []ratelimit.OpResult) error {
	if s.dialed != nil {
		c, err := s.dialed.get()
		if err != nil {
			return err
		}
		return s.evalScripts(ctx, c, mode, ops, [][]int{idx}, out)
	}
	var res any
	var err error
	if s.proc != nil {
		res, err = evalProcess(ctx, s.proc, mode, ops, idx)
	} else {
		keys, args := evalArgs(mode, ops, idx)
		res, err = s.evaluate.Run(ctx, s.client, keys, args...).Result()
		if isForeignPrevious(mode, err) {
			keys, args = evalArgs(modeGeneral, ops, idx)
			res, err = s.evaluate.Run(ctx, s.client, keys, args...).Result()
		}
	}
	if err != nil {
		return fmt.Errorf("redisstore: eval: %w", err)
	}
	return decode(res, ops, out, idx)
}

// groupShards partitions start..end-1 by shard, keeping the order within each.
func groupShards(shards []shard, start, end int) [][]int {
	var seen []shard
	var groups [][]int
	for i := start; i < end; i++ {
		g := indexOf(seen, shards[i])
		if g < 0 {
			seen = append(seen, shards[i])
			groups = append(groups, nil)
			g = len(groups) - 1
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

type scriptCall struct {
	keys []string
	args []any
	// The call's check, ops[idx] in mode: a call that a sliding window's
	// previous count failed is built again in modeGeneral.
	mode ratelimit.Mode
	ops  []ratelimit.Op
	idx  []int
}

// runPipelined runs script once per call in one pipeline. go-redis does not
// fall back from EVALSHA to EVAL inside a pipeline (go-redis#3228), so calls
// that got NOSCRIPT (a node restarted, failed over or ran SCRIPT FLUSH) run
// again with EVAL, which also caches the script on that node, and calls
// that a sliding window's previous count failed (isForeignPrevious) run
// again once in the general form. The returned error covers the pipeline as
// a whole; per-call errors stay in the commands.
func (s *Store) runPipelined(ctx context.Context, script *redis.Script, calls []scriptCall) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := s.client.Pipeline()
	for i := range calls {
		cmds[i] = script.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx)
	for again := 0; again < 2; again++ { // NOSCRIPT, then a foreign previous count
		var retry []int
		for i, c := range cmds {
			if err := c.Err(); err != nil {
				if !isNoScript(err) && !isForeignPrevious(calls[i].mode, err) {
					return nil, err
				}
				retry = append(retry, i)
			}
		}
		if len(retry) == 0 {
			return cmds, nil
		}
		pipe = s.client.Pipeline()
		for _, i := range retry {
			c := &calls[i]
			if isNoScript(cmds[i].Err()) {
				cmds[i] = script.Eval(ctx, pipe, c.keys, c.args...)
				continue
			}
			c.mode = modeGeneral // once: its failure is no longer foreign
			c.keys, c.args = evalArgs(modeGeneral, c.ops, c.idx)
			cmds[i] = script.EvalSha(ctx, pipe, c.keys, c.args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return nil, err
		}
	}
	return cmds, nil
}

// isNoScript reports whether err is Redis' NOSCRIPT answer, from go-redis or
// rueidis.
func isNoScript(err error) bool {
	if err == nil { // HasErrorPrefix allocates even for nil
		return false
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		return re.IsNoScript()
	}
	return redis.HasErrorPrefix(err, "NOSCRIPT")
}
