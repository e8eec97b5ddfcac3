package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
)

// evalSharded runs a check whose keys may live on several cluster nodes: one
// evaluate.lua per shard, all in one pipelined round trip; then, only when a
// terminal op blocked and another shard charged ops after it, a second round
// trip that undoes those charges (see doc.go).
func (s *Store) evalSharded(ctx context.Context, mode ratelimit.Mode, ops []ratelimit.Op, out []ratelimit.Outcome) ([]ratelimit.Outcome, error) {
	for i := range ops {
		if op := &ops[i]; op.BanKey != "" && s.shardOf(op.BanKey) != s.shardOf(op.Key) {
			return nil, fmt.Errorf("redisstore: op %d: counter key %q and ban key %q are on different cluster shards; give them a common {hash tag}",
				i, op.Key, op.BanKey)
		}
	}
	groups := s.group(len(ops), func(i int) string { return ops[i].Key })
	if len(groups) == 1 {
		// One shard: the ops run in order in one script, exactly as on one node.
		return s.evalOne(ctx, mode, ops, out)
	}

	calls := make([]scriptCall, len(groups))
	for g, idx := range groups {
		calls[g].keys, calls[g].args = evalArgs(mode, ops, idx)
	}
	cmds, err := s.runPipelined(ctx, s.evaluate, calls)
	if err != nil {
		return nil, fmt.Errorf("redisstore: eval: %w", err)
	}
	bits := make([]uint8, len(ops))
	for g, idx := range groups {
		res, err := cmds[g].Slice()
		if err != nil {
			return nil, fmt.Errorf("redisstore: eval: %w", err)
		}
		if err := decode(res, out, idx, bits); err != nil {
			return nil, err
		}
	}

	// Sequential semantics: nothing after the first blocking op counts.
	block := -1
	for i := range ops {
		if out[i].Evaluated && out[i].Exceeded && ops[i].Terminal {
			block = i
			break
		}
	}
	if block < 0 {
		return out, nil
	}
	var undo []scriptCall
	for _, idx := range groups {
		var c scriptCall
		// Undo in reverse: when one key is charged twice, the charge that
		// created it is undone last and can then delete it.
		for j := len(idx) - 1; j >= 0; j-- {
			i := idx[j]
			if i <= block || !out[i].Evaluated {
				continue
			}
			out[i] = ratelimit.Outcome{}
			if bits[i]&bitsUndo == 0 {
				continue
			}
			op := &ops[i]
			ban := op.BanKey
			if ban == "" {
				ban = op.Key
			}
			kind := "0 "
			if op.Kind == ratelimit.OpDistinct {
				kind = "1 "
			}
			spec := kind + strconv.Itoa(int(bits[i])) + " " + strconv.FormatFloat(op.Cost, 'g', -1, 64)
			c.keys = append(c.keys, op.Key, ban)
			c.args = append(c.args, spec, op.Member)
		}
		if c.keys != nil {
			undo = append(undo, c)
		}
	}
	if len(undo) == 0 {
		return out, nil
	}
	cmds, err = s.runPipelined(ctx, s.undo, undo)
	if err == nil {
		for _, c := range cmds {
			if err = c.Err(); err != nil {
				break
			}
		}
	}
	if err != nil {
		// The verdict is known but counters past the block stay charged; report
		// it, so that the failure is logged and counted rather than silent.
		return nil, fmt.Errorf("redisstore: undo charges after a block: %w", err)
	}
	return out, nil
}

type scriptCall struct {
	keys []string
	args []any
}

// runPipelined runs script once per call in one pipeline. go-redis does not
// fall back from EVALSHA to EVAL inside a pipeline (go-redis#3228), so calls
// that got NOSCRIPT (a node restarted, failed over or ran SCRIPT FLUSH) run
// again with EVAL, which also caches the script on that node. The returned
// error covers the pipeline as a whole; per-call errors stay in the commands.
func (s *Store) runPipelined(ctx context.Context, script *redis.Script, calls []scriptCall) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := s.client.Pipeline()
	for i := range calls {
		cmds[i] = script.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx)
	var retry []int
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			if !isNoScript(err) {
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
		cmds[i] = script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, i := range retry {
		if err := cmds[i].Err(); err != nil {
			return nil, err
		}
	}
	return cmds, nil
}

func isNoScript(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT")
}
