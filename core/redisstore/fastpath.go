package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

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
// in modeGeneral (retryEvals). A counter whose window the Store remembers
// goes in a known-window form (knownCode), which settle completes.
func (s *Store) evalScripts(ctx context.Context, c rueidis.Client, mode ratelimit.Mode, ops []ratelimit.Op, groups [][]int, out []ratelimit.OpResult) error {
	return s.runScripts(ctx, c, mode, ops, groups, out, true)
}

// runScripts is evalScripts, with the known-window forms when known is set.
func (s *Store) runScripts(ctx context.Context, c rueidis.Client, mode ratelimit.Mode, ops []ratelimit.Op, groups [][]int, out []ratelimit.OpResult, known bool) error {
	sent := s.dialed.windows.now()
	var kn []ratelimit.OpResult // out, when it marks the ops sent in a known-window form
	if known && s.markKnown(mode, ops, groups, out, sent) {
		kn = out
	}
	var f followUps
	if len(groups) <= 1 { // one script call: Do, no slices
		var idx []int
		if len(groups) == 1 {
			idx = groups[0]
		}
		res := c.Do(ctx, evalCommand(c, false, mode, ops, idx, kn))
		if isNoScript(res.Error()) {
			res = c.Do(ctx, evalCommand(c, true, mode, ops, idx, kn))
		}
		if isForeignPrevious(mode, res.Error()) {
			res = c.Do(ctx, evalCommand(c, false, modeGeneral, ops, idx, kn))
		}
		if err := s.decodeResult(res, mode, ops, out, idx, kn, sent, &f); err != nil {
			return err
		}
		return s.settle(ctx, c, mode, ops, out, &f)
	}
	cmds := make(rueidis.Commands, len(groups))
	for g, idx := range groups {
		cmds[g] = evalCommand(c, false, mode, ops, idx, kn)
	}
	res := c.DoMulti(ctx, cmds...)
	retryEvals(ctx, c, mode, res, len(groups), func(g int) (int, []ratelimit.Op, []int, []ratelimit.OpResult) {
		return g, ops, groups[g], kn
	})
	for g, idx := range groups {
		if err := s.decodeResult(res[g], mode, ops, out, idx, kn, sent, &f); err != nil {
			return err
		}
	}
	return s.settle(ctx, c, mode, ops, out, &f)
}

// markKnown marks in out the ops of groups (see evalScripts) that go in a
// known-window form: a counter in the short form whose window the Store
// remembers with at least windowMargin left at sent. Until decodeResult
// reads it, such an op's out[i].TTL holds the ms left (the plain form's
// scratch, appendPlain); every other op of groups gets a zero result. It
// reports whether it marked any.
func (s *Store) markKnown(mode ratelimit.Mode, ops []ratelimit.Op, groups [][]int, out []ratelimit.OpResult, sent int64) bool {
	if mode != ratelimit.ModeCheck {
		return false
	}
	marked := false
	mark := func(i int) {
		op := &ops[i]
		out[i] = ratelimit.OpResult{}
		if short(mode, op) || shortBan(mode, op) {
			if left := s.dialed.windows.left(op.Key, sent); left > 0 && !sharesKey(ops, i) {
				out[i].TTL, marked = time.Duration(left), true
			}
		}
	}
	if len(groups) == 0 {
		groups = [][]int{nil}
	}
	for _, idx := range groups {
		if idx == nil {
			for i := range ops {
				mark(i)
			}
			continue
		}
		for _, i := range idx {
			mark(i)
		}
	}
	return marked
}

// sharesKey reports whether another op of ops than ops[i] has ops[i]'s
// counter key. Such an op (a random test's; keys name their rule) may
// change the key after ops[i] made it anew and before settle reads its TTL,
// so ops[i] goes in the full form, which reads it at once.
func sharesKey(ops []ratelimit.Op, i int) bool {
	for j := range ops {
		if j != i && ops[j].Key == ops[i].Key {
			return true
		}
	}
	return false
}

// followUps is what decodeResult leaves for settle: the ops sent in a
// known-window form whose key INCRBY made anew, without a TTL (deleted or
// evicted before the window the Store remembered ended), and, per script
// call that handed an op back, that op and those after it in the call.
type followUps struct {
	windows []int
	again   [][]int
}

// settle completes a check's script calls with what their known-window ops
// left (f): it starts the windows of the keys made anew and reads their
// TTLs, as decodePlain does, and evaluates the ops handed back, and those
// after them, in the full forms; one round trip each, only when needed.
func (s *Store) settle(ctx context.Context, c rueidis.Client, mode ratelimit.Mode, ops []ratelimit.Op, out []ratelimit.OpResult, f *followUps) error {
	if len(f.windows) > 0 {
		if err := s.startWindows(ctx, c, ops, f.windows, out); err != nil {
			return err
		}
	}
	if len(f.again) == 0 {
		return nil
	}
	for _, g := range f.again {
		// The op handed back is a banned one, or one INCRBY refused (a
		// fraction, a foreign value): the next check sends it in full.
		s.dialed.windows.forget(ops[g[0]].Key)
	}
	return s.runScripts(ctx, c, mode, ops, f.again, out, false)
}

// retryEvals sends again the evaluate.lua calls among res that failed in a
// way a second call mends, in at most two more round trips: NOSCRIPT (the
// server lost the script: a restart, a failover, SCRIPT FLUSH) as EVAL, and
// a sliding window's previous count that is no number (isForeignPrevious)
// once in modeGeneral. call(k), for k below n, gives the k-th call's index
// in res and its ops[idx]. Any other error, and a second failure, stays in
// res for the caller's decoding: it fails that call's check only.
func retryEvals(ctx context.Context, c rueidis.Client, mode ratelimit.Mode, res []rueidis.RedisResult, n int, call func(k int) (at int, ops []ratelimit.Op, idx []int, known []ratelimit.OpResult)) {
	var general []bool // the calls sent again in the general form, once only
	for round := 0; round < 2; round++ {
		var retry []int
		var again rueidis.Commands
		for k := range n {
			at, ops, idx, kn := call(k)
			err := res[at].Error()
			switch {
			case err == nil:
				continue
			case isNoScript(err):
				again = append(again, evalCommand(c, true, mode, ops, idx, kn))
			case (general == nil || !general[k]) && isForeignPrevious(mode, err):
				if general == nil {
					general = make([]bool, n)
				}
				general[k] = true
				again = append(again, evalCommand(c, false, modeGeneral, ops, idx, kn))
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
// nil): EVALSHA, or EVAL with the source, with the KEYS and ARGV of evalCmd,
// but the ops that known (nil: none) marks (markKnown) in a known-window
// form.
// On a Cluster the keys of one call share a slot, by which rueidis routes
// the call (on one server it picks the connection): Keys computes it from
// the first key, and the others go as plain arguments, each sparing a CRC16
// of its hash tag (the wire command is the same).
func evalCommand(c rueidis.Client, eval bool, mode ratelimit.Mode, ops []ratelimit.Op, idx []int, known []ratelimit.OpResult) rueidis.Completed {
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
		if known != nil && known[indexAt(idx, j)].TTL > 0 {
			code = knownCode(op)
		}
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
// one evaluate.lua call for ops[idx[j]], sent at sent, known (nil: none)
// marking the ops sent in a known-window form (markKnown), whose follow-ups
// it adds to f. It remembers the windows the reply tells of (rememberWindow).
func (s *Store) decodeResult(res rueidis.RedisResult, mode ratelimit.Mode, ops []ratelimit.Op, out []ratelimit.OpResult, idx []int, known []ratelimit.OpResult, sent int64, f *followUps) error {
	n := len(ops)
	if idx != nil {
		n = len(idx)
	}
	isKnownOp := func(j int) bool { return known != nil && j < n && known[indexAt(idx, j)].TTL > 0 }
	msg, err := res.ToMessage()
	if isKnownOp(0) && rueidis.IsRedisNil(err) { // the only value: nil
		handBack(out, idx, 0, n, f)
		return nil
	}
	if err != nil {
		return fmt.Errorf("redisstore: eval: %w", err)
	}
	if msg.IsInt64() {
		v, _ := msg.ToInt64()
		i := indexAt(idx, 0)
		if isKnownOp(0) {
			decodeKnown(&ops[i], &out[i], v, i, f)
		} else {
			if err := unpack(v, ops, out, idx); err != nil {
				return err
			}
			s.rememberWindow(mode, &ops[i], &out[i], sent)
		}
		return s.decoded(ops, out, idx, 1, n, known)
	}
	vals, err := msg.ToArray()
	if err != nil {
		return fmt.Errorf("redisstore: eval: %w", err)
	}
	j, at := 0, 0
	for ; j < n && at < len(vals); j++ {
		i := indexAt(idx, j)
		if isKnownOp(j) {
			if vals[at].IsNil() {
				if at != len(vals)-1 {
					return fmt.Errorf("redisstore: eval: op %d handed back before the reply's end", j)
				}
				handBack(out, idx, j, n, f)
				return nil
			}
			v, err := vals[at].ToInt64()
			if err != nil {
				return fmt.Errorf("redisstore: eval: op %d count: %w", j, err)
			}
			decodeKnown(&ops[i], &out[i], v, i, f)
			at++
			continue
		}
		if at+3 > len(vals) {
			break
		}
		count, err := messageCount(&vals[at])
		if err != nil {
			return fmt.Errorf("redisstore: eval: op %d count: %w", j, err)
		}
		ttl, err1 := vals[at+1].ToInt64()
		bits, err2 := vals[at+2].ToInt64()
		if err1 != nil || err2 != nil {
			return fmt.Errorf("redisstore: eval: op %d: unexpected reply types", j)
		}
		out[i] = outcome(&ops[i], count, ttl, bits)
		s.rememberWindow(mode, &ops[i], &out[i], sent)
		at += 3
	}
	if at != len(vals) {
		return fmt.Errorf("redisstore: eval: %d reply values for %d ops", len(vals), n)
	}
	return s.decoded(ops, out, idx, j, n, known)
}

// decoded ends decodeResult for a reply of got of the n ops sent: it checks
// that a reply that ended early ended by a block (stopped) and clears the
// marks (markKnown) of the ops not evaluated.
func (s *Store) decoded(ops []ratelimit.Op, out []ratelimit.OpResult, idx []int, got, n int, known []ratelimit.OpResult) error {
	if err := stopped(ops, out, idx, got, n); err != nil {
		return err
	}
	if known != nil {
		for j := got; j < n; j++ {
			out[indexAt(idx, j)] = ratelimit.OpResult{}
		}
	}
	return nil
}

// handBack records that the script handed back the j-th of the n ops sent
// (ops[idx], all ops when idx is nil), charging nothing for it and
// evaluating nothing after it: settle evaluates them in the full forms.
func handBack(out []ratelimit.OpResult, idx []int, j, n int, f *followUps) {
	again := make([]int, 0, n-j)
	for ; j < n; j++ {
		i := indexAt(idx, j)
		out[i] = ratelimit.OpResult{}
		again = append(again, i)
	}
	f.again = append(f.again, again)
}

// decodeKnown fills r, op's outcome (ops[i]), from v, its count as a
// known-window form returns it; r holds the ms left in the window that the
// Store remembered (markKnown). A count no more than the cost says the key
// was made anew: settle starts its window.
func decodeKnown(op *ratelimit.Op, r *ratelimit.OpResult, v int64, i int, f *followUps) {
	*r = counterOutcome(op, v, int64(r.TTL))
	if v <= int64(op.Cost) {
		f.windows = append(f.windows, i)
	}
}

// rememberWindow remembers when op's window ends from r, its outcome in a
// full form sent at sent: that of a counter in the short form of a check,
// not banned, with a whole count (the next check of a fractional one would
// only be handed back). A check's other ops on the key make the Store forget
// its window: the general code may have replaced the key (a value of
// another kind, a fraction summed), whose window the Store would otherwise
// report for the old one.
func (s *Store) rememberWindow(mode ratelimit.Mode, op *ratelimit.Op, r *ratelimit.OpResult, sent int64) {
	switch {
	case mode == ratelimit.ModePeek: // wrote nothing
	case r.Banned || r.Count != math.Trunc(r.Count) || !short(mode, op) && !shortBan(mode, op):
		s.dialed.windows.forget(op.Key)
	default:
		s.dialed.windows.remember(op.Key, sent, r.TTL.Milliseconds())
	}
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
