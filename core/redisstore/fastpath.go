package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/rueidis"

	ratelimit "github.com/ratekit/ratekit/core"
)

// The rueidis path: a Store from Dial or Open sends its commands through a
// rueidis client, whose auto-pipelining writes the commands of concurrent
// callers together on a few connections per server, and whose DoMulti sends
// the commands of one round trip to every Cluster node they live on at once.

// commandsPool holds the command slices of the plain form: with one rule
// and 64 callers a check then allocates 5.1 times instead of 6.1, within the
// bound of 6 (TestDialCheckAllocations); the time it saves is within the
// benchmarks' noise.
var commandsPool sync.Pool // *rueidis.Commands

// maxPooledCommands bounds the slices commandsPool keeps: the plain form of a
// check of up to 32 ops.
const maxPooledCommands = 96

// settled reports whether a DoMulti that returned res is done with its
// commands. After a network error or an ended context it may not be: a call
// that its context ended returns before its commands were written, and a
// broken connection fails the calls queued on it while its writer may still
// be reading them (seen by the race detector in TestDialFaults).
func settled(res []rueidis.RedisResult) bool {
	for i := range res {
		if res[i].NonRedisError() != nil {
			return false
		}
	}
	return true
}

func getCommands() *rueidis.Commands {
	if p, _ := commandsPool.Get().(*rueidis.Commands); p != nil {
		return p
	}
	return new(rueidis.Commands)
}

// putCommands returns cmds, built in *p, to the pool once their call returned
// res (err: none) unless rueidis may still write them (see settled).
func putCommands(p *rueidis.Commands, cmds rueidis.Commands, res []rueidis.RedisResult, err error) {
	if err != nil || !settled(res) || cap(cmds) > maxPooledCommands {
		return
	}
	clear(cmds) // rueidis recycles the commands themselves
	*p = cmds[:0]
	commandsPool.Put(p)
}

// evalDialed is Eval on a Store from Dial or Open.
func (s *Store) evalDialed(ctx context.Context, mode ratelimit.Mode, ops []ratelimit.Op, out []ratelimit.OpResult) (_ []ratelimit.OpResult, err error) {
	c, err := s.dialed.get()
	if err != nil {
		return nil, err
	}
	s.dialed.tries.note(ctx)
	defer func() {
		if err != nil {
			s.dialed.failed(c, err)
			err = withDeadline(ctx, err)
		}
	}()
	if plainOps(mode, ops) && !s.dialed.noPlain.Load() {
		return s.evalPlain(ctx, c, ops, out)
	}
	if s.sharding == single {
		if err := s.evalScripts(ctx, c, mode, ops, nil, out); err != nil {
			return nil, err
		}
		return out, nil
	}
	return s.evalSharded(ctx, mode, ops, out)
}

// evalScripts runs evaluate.lua once per group of ops (groups holds indexes
// into ops, one group per shard; nil is all of ops in one), all in one round
// trip, and decodes each reply into out. A call that got NOSCRIPT (the
// server lost the script) runs again as EVAL, which caches the script on
// that server again, and one that a foreign previous count failed runs again
// in modeGeneral (retryEvals).
func (s *Store) evalScripts(ctx context.Context, c rueidis.Client, mode ratelimit.Mode, ops []ratelimit.Op, groups [][]int, out []ratelimit.OpResult) error {
	if len(groups) <= 1 { // one script call: Do, no slices
		var idx []int
		if len(groups) == 1 {
			idx = groups[0]
		}
		res := c.Do(ctx, evalCommand(c, false, mode, ops, idx))
		if isNoScript(res.Error()) {
			res = c.Do(ctx, evalCommand(c, true, mode, ops, idx))
		}
		if isForeignPrevious(mode, res.Error()) {
			res = c.Do(ctx, evalCommand(c, false, modeGeneral, ops, idx))
		}
		return decodeResult(res, ops, out, idx)
	}
	cmds := make(rueidis.Commands, len(groups))
	for g, idx := range groups {
		cmds[g] = evalCommand(c, false, mode, ops, idx)
	}
	res := c.DoMulti(ctx, cmds...)
	retryEvals(ctx, c, mode, res, len(groups), func(g int) (int, []ratelimit.Op, []int) { return g, ops, groups[g] })
	for g, idx := range groups {
		if err := decodeResult(res[g], ops, out, idx); err != nil {
			return err
		}
	}
	return nil
}

// retryEvals sends again the evaluate.lua calls among res that failed in a
// way a second call mends, in at most two more round trips: NOSCRIPT (the
// server lost the script: a restart, a failover, SCRIPT FLUSH) as EVAL, and
// a sliding window's previous count that is no number (isForeignPrevious)
// once in modeGeneral. call(k), for k below n, gives the k-th call's index
// in res and its ops[idx]. Any other error, and a second failure, stays in
// res for the caller's decoding: it fails that call's check only.
func retryEvals(ctx context.Context, c rueidis.Client, mode ratelimit.Mode, res []rueidis.RedisResult, n int, call func(k int) (at int, ops []ratelimit.Op, idx []int)) {
	var general []bool // the calls sent again in the general form, once only
	for round := 0; round < 2; round++ {
		var retry []int
		var again rueidis.Commands
		for k := range n {
			at, ops, idx := call(k)
			err := res[at].Error()
			switch {
			case err == nil:
				continue
			case isNoScript(err):
				again = append(again, evalCommand(c, true, mode, ops, idx))
			case (general == nil || !general[k]) && isForeignPrevious(mode, err):
				if general == nil {
					general = make([]bool, n)
				}
				general[k] = true
				again = append(again, evalCommand(c, false, modeGeneral, ops, idx))
			default:
				continue
			}
			retry = append(retry, at)
		}
		if retry == nil {
			return
		}
		for i, r := range c.DoMulti(ctx, again...) {
			res[retry[i]] = r
		}
	}
}

// evalCommand is the evaluate.lua call for ops[idx] (all ops when idx is
// nil): EVALSHA, or EVAL with the source, with the KEYS and ARGV of evalCmd.
// On a Cluster the keys of one call share a slot, by which rueidis routes
// the call (on one server it picks the connection): Keys computes it from
// the first key, and the others go as plain arguments, each sparing a CRC16
// of its hash tag (the wire command is the same).
func evalCommand(c rueidis.Client, eval bool, mode ratelimit.Mode, ops []ratelimit.Op, idx []int) rueidis.Completed {
	n := len(ops)
	if idx != nil {
		n = len(idx)
	}
	nkeys := 0
	for j := range n {
		nkeys += keyCount(opAt(ops, idx, j))
	}
	name, script := "EVALSHA", evaluateHash
	if eval {
		name, script = "EVAL", evaluateLua
	}
	cmd := c.B().Arbitrary(name, script, strconv.Itoa(nkeys))
	for j := range n {
		op := opAt(ops, idx, j)
		if j == 0 {
			cmd = cmd.Keys(op.Key)
		} else {
			cmd = cmd.Args(op.Key)
		}
		if op.BanKey != "" {
			cmd = cmd.Args(op.BanKey)
		}
	}
	for j := range n {
		op := opAt(ops, idx, j)
		code := opCode(mode, op)
		cmd = cmd.Args(opCodes[code])
		f, nf, frac := fieldsOf(code, op)
		for _, v := range f[:nf] {
			cmd = cmd.Args(numStr(v))
		}
		if frac {
			cmd = cmd.Args(strconv.FormatFloat(op.Cost, 'g', -1, 64))
		}
		if isFullBucketForm(code) {
			ms, fr := fullBucket(op)
			cmd = cmd.Args(numStr(ms), fr.s)
			continue
		}
		if isShort(code) {
			continue
		}
		if op.Kind == ratelimit.OpTokenBucket {
			cmd = cmd.Args(numStr(op.Burst)) // the burst in the member's place
			continue
		}
		cmd = cmd.Args(op.Member)
	}
	return cmd.Build()
}

// decodeResult fills out[idx[j]] (out[j] when idx is nil) from the reply of
// one evaluate.lua call for ops[idx[j]].
func decodeResult(res rueidis.RedisResult, ops []ratelimit.Op, out []ratelimit.OpResult, idx []int) error {
	msg, err := res.ToMessage()
	if err != nil {
		return fmt.Errorf("redisstore: eval: %w", err)
	}
	if msg.IsInt64() {
		v, _ := msg.ToInt64()
		return unpack(v, ops, out, idx)
	}
	vals, err := msg.ToArray()
	if err != nil {
		return fmt.Errorf("redisstore: eval: %w", err)
	}
	n := len(out)
	if idx != nil {
		n = len(idx)
	}
	if len(vals)%3 != 0 || len(vals)/3 > n {
		return fmt.Errorf("redisstore: eval: %d reply values for %d ops", len(vals), n)
	}
	for j := range len(vals) / 3 {
		count, err := messageCount(&vals[3*j])
		if err != nil {
			return fmt.Errorf("redisstore: eval: op %d count: %w", j, err)
		}
		ttl, err1 := vals[3*j+1].ToInt64()
		bits, err2 := vals[3*j+2].ToInt64()
		if err1 != nil || err2 != nil {
			return fmt.Errorf("redisstore: eval: op %d: unexpected reply types", j)
		}
		i := j
		if idx != nil {
			i = idx[j]
		}
		out[i] = outcome(&ops[i], count, ttl, bits)
	}
	return stopped(ops, out, idx, len(vals)/3, n)
}

// messageCount is a count of evaluate.lua's reply: an integer, or a decimal
// string for a fractional count.
func messageCount(m *rueidis.RedisMessage) (float64, error) {
	if m.IsInt64() {
		n, err := m.ToInt64()
		return float64(n), err
	}
	s, err := m.ToString()
	if err != nil {
		return 0, err
	}
	return strconv.ParseFloat(s, 64)
}

// deleteDialed is Delete on a Store from Dial or Open: one DEL per shard, in
// one round trip.
func (s *Store) deleteDialed(ctx context.Context, keys []string) (_ int, err error) {
	c, err := s.dialed.get()
	if err != nil {
		return 0, err
	}
	s.dialed.tries.note(ctx)
	defer func() {
		if err != nil {
			s.dialed.failed(c, err)
		}
	}()
	for _, k := range keys { // a check after the delete starts a new window
		s.dialed.windows.forget(k)
	}
	var cmds rueidis.Commands
	if s.sharding == single {
		cmds = rueidis.Commands{c.B().Del().Key(keys...).Build()}
	} else {
		for _, g := range s.group(len(keys), func(i int) string { return keys[i] }) {
			gk := make([]string, len(g))
			for j, k := range g {
				gk[j] = keys[k]
			}
			cmds = append(cmds, c.B().Del().Key(gk...).Build())
		}
	}
	n := 0
	for _, r := range c.DoMulti(ctx, cmds...) {
		v, cerr := r.AsInt64()
		if cerr != nil {
			err = firstErr(err, cerr)
			continue
		}
		n += int(v)
	}
	if err != nil {
		return n, fmt.Errorf("redisstore: delete: %w", err)
	}
	return n, nil
}
