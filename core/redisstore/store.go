package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/goredis"
	ikeys "github.com/ratekit/ratekit/internal/keys"
)

//go:embed evaluate.lua
var evaluateLua string

var (
	evaluateScript = redis.NewScript(evaluateLua)
	evaluateHash   = evaluateScript.Hash()
)

// Client is what the store needs from a go-redis client: scripts, pipelines
// and DEL. *redis.Client (also from NewFailoverClient), *redis.ClusterClient,
// *redis.Ring, *redis.AutoPipeliner and every redis.UniversalClient satisfy it.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	Del(ctx context.Context, keys ...string) *redis.IntCmd
}

// sharding says how keys map to servers, and so which ops may share a script.
type sharding uint8

const (
	single sharding = iota // one server: every op in one script
	bySlot                 // Redis Cluster: one script per hash slot
	byTag                  // Ring: one script per hash tag (Ring hashes tags, not slots)
)

// Store is a ratelimit.Store on Redis. It is safe for concurrent use.
type Store struct {
	client   Client // New: the go-redis client
	sharding sharding
	evaluate *redis.Script // evaluateScript; a field so tests can send one unknown to the server
	bounded  bool          // the client honours context deadlines
	proc     processor     // client, when it is one of go-redis' own clients

	// learn: New could not tell a cluster from the client's type (an
	// autopipeliner, a wrapper), so the Store counts it as one server until
	// the server answers CROSSSLOT; clustered records that answer.
	learn     bool
	clustered atomic.Bool

	dialed *dialed       // Dial and Open: the rueidis client (client is nil)
	parts  *clusterParts // New on a *redis.ClusterClient: the slot table of Partition
}

var (
	_ ratelimit.Store                    = (*Store)(nil)
	_ interface{ ContextBounded() bool } = (*Store)(nil) // the Limiter's contextBounded
)

// ContextBounded reports whether every call returns by its context's
// deadline: always for a Store from Dial or Open (rueidis honours it), and
// for New when the go-redis client was built with ContextTimeoutEnabled. The
// Limiter then skips its guard goroutine per check. Otherwise go-redis waits
// for its own ReadTimeout (3s by default) and the Limiter guards each call
// instead: either way a check never waits past Config.Timeout.
func (s *Store) ContextBounded() bool { return s.bounded }

// Option configures New.
type Option func(*Store)

// WithClusterMode forces (true) or rules out (false) the Redis Cluster
// evaluation path, for clients whose type does not tell, such as a wrapper
// around *redis.ClusterClient. By default New detects *redis.ClusterClient
// and *redis.Ring by type, and counts any other client (a wrapper, an
// *redis.AutoPipeliner) as one server until a check is answered CROSSSLOT,
// which nothing runs on: the check is then sent again grouped by slot, as
// every later one. Forced cluster mode groups keys by hash slot; a
// *redis.Ring is always grouped by hash tag unless cluster mode is forced off.
// A wrapper of a Ring, whose standalone servers never answer CROSSSLOT, is
// served right by neither mode (two hash tags of one slot may live on two
// of its servers): give New the *redis.Ring itself.
func WithClusterMode(on bool) Option {
	return func(s *Store) {
		s.learn = false
		switch {
		case !on:
			s.sharding = single
		case s.sharding != byTag:
			s.sharding = bySlot
		}
	}
}

// New returns a Store that keeps its counters in the Redis behind client.
// The store does not own client: closing it is the caller's business.
func New(client Client, opts ...Option) *Store {
	s := &Store{client: client, evaluate: evaluateScript, learn: true}
	switch c := client.(type) {
	case *redis.Client:
		s.proc, s.learn = c, false
		s.bounded = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		s.proc, s.learn = c, false
		s.sharding = bySlot
		s.bounded = c.Options().ContextTimeoutEnabled
		s.parts = newClusterParts(c)
	case *redis.Ring:
		s.proc, s.learn = c, false
		s.sharding = byTag
		s.bounded = c.Options().ContextTimeoutEnabled
	case *redis.AutoPipeliner:
		// It is never bounded: a queued command ignores its caller's context
		// (go-redis runs each batch on the pipeliner's own), so the Limiter
		// keeps its guard to answer within Config.Timeout. Whether it batches
		// for a cluster client is learnt from the first CROSSSLOT.
		s.proc = c
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// shardingNow is how keys map to servers: the Store's own sharding, or by
// slot once a client New could not tell answered CROSSSLOT.
func (s *Store) shardingNow() sharding {
	if s.learn && s.clustered.Load() {
		return bySlot
	}
	return s.sharding
}

// Result bits of evaluate.lua, per op.
const (
	bitBanned   = 1
	bitExceeded = 2
	// bitState: the count value is what the count is computed from (see
	// stateCount), sent so that Redis need not format a fraction as a decimal
	// string, which costs it about as much as a command.
	bitState = 4
)

// Eval implements ratelimit.Store: one script call applies all ops in order,
// in one round trip. On Redis Cluster ops are grouped by slot (see "Redis
// Cluster and Ring" in the package documentation).
func (s *Store) Eval(ctx context.Context, mode ratelimit.Mode, ops []ratelimit.Op) ([]ratelimit.OpResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ratelimit.CheckCosts(ops); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	out := make([]ratelimit.OpResult, len(ops))
	if len(ops) == 0 {
		return out, nil
	}
	if s.dialed != nil {
		return s.evalDialed(ctx, mode, ops, out)
	}
	if s.shardingNow() != single {
		res, err := s.evalSharded(ctx, mode, ops, out)
		if err != nil {
			goredis.ReloadSlots(s.client) // a failover: see ReloadSlots
			if s.parts != nil {
				s.parts.expire() // and Partition's table
			}
		}
		return res, err
	}
	res, err := s.evalOne(ctx, mode, ops, out)
	if err != nil && s.learnCluster(err) {
		return s.evalSharded(ctx, mode, ops, out)
	}
	return res, err
}

// learnCluster reports whether err is a CROSSSLOT answer to a Store that
// learns its sharding, and records that its client is a cluster's. Redis
// Cluster refuses a command whose keys span slots before running any of it.
func (s *Store) learnCluster(err error) bool {
	if !s.learn || err == nil || !redis.HasErrorPrefix(err, "CROSSSLOT") {
		return false
	}
	s.clustered.Store(true)
	return true
}

// evalOne applies all ops, which share a shard, in one script call: EVALSHA,
// or EVAL after NOSCRIPT (see evalGroup).
func (s *Store) evalOne(ctx context.Context, mode ratelimit.Mode, ops []ratelimit.Op, out []ratelimit.OpResult) ([]ratelimit.OpResult, error) {
	if err := s.evalGroup(ctx, mode, ops, nil, out); err != nil {
		return nil, err
	}
	return out, nil
}

// processor is the method of go-redis' clients (*redis.Client,
// *redis.ClusterClient, *redis.Ring, *redis.AutoPipeliner) that runs a
// prepared command through the client's hooks.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// The script's hash and source, converted to interfaces once: converting a
// string to an interface allocates.
var (
	evaluateSHA any = evaluateHash
	evaluateSrc any = evaluateLua
)

// evalProcess runs evaluate.lua on ops[idx] (all ops when idx is nil) as one
// prepared EVALSHA, and as EVAL when the server does not have the script
// cached (after a restart, a failover or SCRIPT FLUSH).
func evalProcess(ctx context.Context, p processor, mode ratelimit.Mode, ops []ratelimit.Op, idx []int) (any, error) {
	var buf *[]any
	if _, queued := p.(*redis.AutoPipeliner); !queued {
		buf = getArgs()
		defer putArgs(buf)
	}
	args := appendEvalCmd(buf, mode, ops, idx)
	cmd := newEvalCmd(ctx, args)
	err := p.Process(ctx, cmd)
	if isNoScript(err) {
		args[0], args[1] = "eval", evaluateSrc
		cmd = newEvalCmd(ctx, args)
		err = p.Process(ctx, cmd)
	}
	if isForeignPrevious(mode, err) {
		args = appendEvalCmd(buf, modeGeneral, ops, idx)
		cmd = newEvalCmd(ctx, args)
		err = p.Process(ctx, cmd)
	}
	if err != nil {
		return nil, err
	}
	return cmd.Result()
}

// isForeignPrevious reports whether err is evaluate.lua's failure on a
// sliding window's previous count that is no number, in the short form of a
// check's first op (see the 'w' form): the script call is sent again, once,
// in modeGeneral, which replaces the hash. Nothing else was written.
func isForeignPrevious(mode ratelimit.Mode, err error) bool {
	return err != nil && mode == ratelimit.ModeCheck && strings.Contains(err.Error(), "arithmetic on local 'prevcount'")
}

// argsPool holds the argument slices of evalProcess's commands: one
// allocation per check less on the go-redis path, which keeps a one-rule
// check within 10 (TestClientCheckAllocations); the time it saves is within
// the benchmarks' noise. A
// client that runs the command on the caller's goroutine (*redis.Client, and
// the cluster and ring clients, which route it to one) has let go of it when
// Process returns; the autopipeliner may still hold a command whose caller
// gave up, so its commands are never reused. A hook that keeps a command
// past its call must copy its arguments.
var argsPool sync.Pool // *[]any

// maxPooledArgs bounds the slices argsPool keeps: the command of a check of
// up to about 30 ops.
const maxPooledArgs = 256

func getArgs() *[]any {
	if p, _ := argsPool.Get().(*[]any); p != nil {
		return p
	}
	return new([]any)
}

func putArgs(p *[]any) {
	if cap(*p) > maxPooledArgs {
		return
	}
	clear((*p)[:cap(*p)]) // keys and members: no reference kept
	argsPool.Put(p)
}

// newEvalCmd returns the command of args, an evalCmd, with what a cluster
// client would otherwise look up per command: the position of KEYS[1], which
// it routes by (as EvalSha sets it), and the step between keys, which spares
// it a lookup of the command's COMMAND INFO (and, with ContextTimeoutEnabled,
// a timeout context for it) on every check.
func newEvalCmd(ctx context.Context, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	cmd.SetStepCount(1)
	return cmd
}

// evalCmd is the whole EVALSHA command of evaluate.lua for ops[idx] (all ops
// when idx is nil), in one slice: the name, the hash, the key count, KEYS and
// ARGV as evalArgs builds them.
func evalCmd(mode ratelimit.Mode, ops []ratelimit.Op, idx []int) []any {
	return appendEvalCmd(nil, mode, ops, idx)
}

// appendEvalCmd is evalCmd in *buf (a fresh slice when buf is nil), which
// keeps the slice for its next use.
func appendEvalCmd(buf *[]any, mode ratelimit.Mode, ops []ratelimit.Op, idx []int) []any {
	n := len(ops)
	if idx != nil {
		n = len(idx)
	}
	nkeys := 0
	for j := range n {
		nkeys += keyCount(opAt(ops, idx, j))
	}
	var cmd []any
	if buf != nil && cap(*buf) >= 3+nkeys+6*n {
		cmd = (*buf)[:3]
	} else {
		cmd = make([]any, 3, 3+nkeys+6*n)
	}
	cmd[0], cmd[1], cmd[2] = "evalsha", evaluateSHA, nkeys
	for j := range n {
		op := opAt(ops, idx, j)
		cmd = append(cmd, op.Key)
		if op.BanKey != "" {
			cmd = append(cmd, op.BanKey)
		}
	}
	cmd = appendArgv(cmd, mode, ops, idx)
	if buf != nil {
		*buf = cmd
	}
	return cmd
}

// evalArgs builds the KEYS and ARGV of evaluate.lua for ops[idx] (all ops when
// idx is nil).
func evalArgs(mode ratelimit.Mode, ops []ratelimit.Op, idx []int) ([]string, []any) {
	n := len(ops)
	if idx != nil {
		n = len(idx)
	}
	keys := make([]string, 0, 2*n)
	for j := range n {
		op := opAt(ops, idx, j)
		keys = append(keys, op.Key)
		if op.BanKey != "" {
			keys = append(keys, op.BanKey)
		}
	}
	return keys, appendArgv(make([]any, 0, 6*n), mode, ops, idx)
}

// appendArgv appends the ARGV of evaluate.lua for ops[idx] (all ops when idx
// is nil) to args: each op's code, fields (see fieldsOf) and,
// in the general form, member.
func appendArgv(args []any, mode ratelimit.Mode, ops []ratelimit.Op, idx []int) []any {
	n := len(ops)
	if idx != nil {
		n = len(idx)
	}
	for j := range n {
		op := opAt(ops, idx, j)
		code := opCode(mode, op)
		args = appendNumArgs(args, code, op)
		if isShort(code) {
			continue
		}
		if op.Kind == ratelimit.OpTokenBucket {
			args = append(args, numArg(op.Burst))
			continue
		}
		args = append(args, op.Member)
	}
	return args
}

func opAt(ops []ratelimit.Op, idx []int, j int) *ratelimit.Op {
	return &ops[indexAt(idx, j)]
}

// indexAt is the index in ops of the j-th op of ops[idx] (all ops when idx is
// nil).
func indexAt(idx []int, j int) int {
	if idx == nil {
		return j
	}
	return idx[j]
}

// millis rounds a positive duration up to whole milliseconds, the precision of
// PEXPIRE and SET PX. The longest Duration is 9223372036855 ms: d + 999999
// would overflow into a negative period, which PEXPIRE takes as "delete now".
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d > math.MaxInt64-(time.Millisecond-1) {
		return maxTTLMillis + 1
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// maxTTLMillis is the most milliseconds a Duration holds.
const maxTTLMillis = math.MaxInt64 / int64(time.Millisecond)

// decode fills out[idx[j]] (out[j] when idx is nil) from evaluate.lua's reply
// for ops[idx[j]].
func decode(reply any, ops []ratelimit.Op, out []ratelimit.OpResult, idx []int) error {
	if v, ok := reply.(int64); ok {
		return unpack(v, ops, out, idx)
	}
	res, ok := reply.([]any)
	if !ok {
		return fmt.Errorf("redisstore: eval: unexpected reply %T", reply)
	}
	n := len(out)
	if idx != nil {
		n = len(idx)
	}
	if len(res)%3 != 0 || len(res)/3 > n {
		return fmt.Errorf("redisstore: eval: %d reply values for %d ops", len(res), n)
	}
	for j := 0; j < len(res)/3; j++ {
		count, err := toFloat(res[3*j])
		if err != nil {
			return fmt.Errorf("redisstore: eval: op %d count: %w", j, err)
		}
		ttl, ok1 := res[3*j+1].(int64)
		b, ok2 := res[3*j+2].(int64)
		if !ok1 || !ok2 {
			return fmt.Errorf("redisstore: eval: op %d: unexpected reply %v", j, res[3*j:3*j+3])
		}
		i := j
		if idx != nil {
			i = idx[j]
		}
		out[i] = outcome(&ops[i], count, ttl, b)
	}
	return stopped(ops, out, idx, len(res)/3, n)
}

// stopped checks a reply that evaluated got of the n ops sent (ops[idx], all
// ops when idx is nil), whose outcomes are in out: evaluate.lua evaluates
// every op but those after an exceeded terminal op, where it stops. A reply
// that ends early on any other op is malformed: the Limiter, which stops at
// the first op not evaluated, would pass the check without the rest.
func stopped(ops []ratelimit.Op, out []ratelimit.OpResult, idx []int, got, n int) error {
	if got == n {
		return nil
	}
	if got > 0 {
		i := got - 1
		if idx != nil {
			i = idx[i]
		}
		if ops[i].Terminal && out[i].Exceeded {
			return nil
		}
	}
	return fmt.Errorf("redisstore: eval: a reply for %d of %d ops, not ended by a block", got, n)
}

// ttlBits are the bits a packed reply holds its ttl in, by its tier.
var ttlBits = [4]uint{16, 22, 27, 32}

// unpack fills the first op's result (out[idx[0]], out[0] when idx is nil)
// from v, the reply of evaluate.lua that packs its first op's three values in
// one integer (the only op, or one that blocked the rest): count * 2^(5 + w)
// + ttl * 32 + tier * 8 + bits, w being ttlBits[tier].
func unpack(v int64, ops []ratelimit.Op, out []ratelimit.OpResult, idx []int) error {
	i := 0
	if idx != nil {
		if len(idx) == 0 {
			return fmt.Errorf("redisstore: eval: a packed reply for no op")
		}
		i = idx[0]
	}
	if v < 0 || i >= len(out) {
		return fmt.Errorf("redisstore: eval: packed reply %d for %d ops", v, len(out))
	}
	w := ttlBits[v>>3&3]
	ttl := v >> 5 & (1<<w - 1)
	out[i] = outcome(&ops[i], float64(v>>(5+w)), ttl, v&7)
	n := len(out)
	if idx != nil {
		n = len(idx)
	}
	return stopped(ops, out, idx, 1, n)
}

// maxCount is the largest count a Store reports (ratelimit.MaxCount + 1).
const maxCount = ratelimit.MaxCount + 1

// outcome is op's Outcome from its three reply values. A TTL past the
// longest Duration (about 292 years: a token bucket of an absurd burst
// refilling, a sliding window of over 146 years exceeded, the longest period) is
// the longest Duration, as in the memory store (ceilDuration): converted as
// it is, it would overflow into the past. This is the one place the store
// converts milliseconds to a TTL (ttlOf).
func outcome(op *ratelimit.Op, count float64, ttlMillis, bits int64) ratelimit.OpResult {
	if bits&bitState != 0 {
		count = stateCount(op, count, ttlMillis)
	}
	if count > maxCount {
		// INCRBY counts past 2^53 exactly, a float64 does not: every Store
		// reports such a count as 2^53 (ratelimit.MaxCount).
		count = maxCount
	}
	return ratelimit.OpResult{
		Evaluated: true,
		Count:     count,
		TTL:       ttlOf(ttlMillis),
		Banned:    bits&bitBanned != 0,
		Exceeded:  bits&bitExceeded != 0,
	}
}

// ttlOf is a TTL of ms milliseconds: past the longest Duration, the longest.
func ttlOf(ms int64) time.Duration {
	if ms > maxTTLMillis {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}

// stateCount is the count of a passed sliding window or token bucket op
// from the state evaluate.lua sent for it (bitState): a sliding window's
// count times its period in milliseconds, a whole number; for a token
// bucket, frac, by which the bucket's time (ttlMillis) was rounded up to a
// millisecond, each token taking period / limit.
func stateCount(op *ratelimit.Op, v float64, ttlMillis int64) float64 {
	period := float64(millis(op.Period))
	if op.Kind == ratelimit.OpTokenBucket {
		return (float64(ttlMillis) - v) / (period / float64(op.Limit))
	}
	return v / period
}

func toFloat(v any) (float64, error) {
	switch v := v.(type) {
	case string:
		return strconv.ParseFloat(v, 64)
	case int64:
		return float64(v), nil
	}
	return 0, fmt.Errorf("unexpected %T %v", v, v)
}

// Delete implements ratelimit.Store: one DEL, or on a cluster one DEL per slot,
// pipelined.
func (s *Store) Delete(ctx context.Context, keys []string) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	if s.dialed != nil {
		return s.deleteDialed(ctx, keys)
	}
	if s.shardingNow() == single {
		n, err := s.client.Del(ctx, keys...).Result()
		if !s.learnCluster(err) {
			if err != nil {
				return 0, fmt.Errorf("redisstore: delete: %w", err)
			}
			return int(n), nil
		}
	}
	groups := s.group(len(keys), func(i int) string { return keys[i] })
	pipe := s.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(groups))
	for i, g := range groups {
		gk := make([]string, len(g))
		for j, k := range g {
			gk[j] = keys[k]
		}
		cmds[i] = pipe.Del(ctx, gk...)
	}
	_, err := pipe.Exec(ctx)
	n := 0
	for _, c := range cmds {
		v, cerr := c.Result()
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

// firstErr returns the first non-nil error.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Partition returns the part of the Redis Cluster that holds key, for the
// Limiter's circuit breakers (a breaker per part: a master that is down
// fails open only the checks with a key on it): a number below 255 that
// stands for the master serving key's slot in the store's slot table (see
// "Redis Cluster and Ring"), the same number for that master while the
// store lives. It is -1 on a single server, a Sentinel or a Ring, for a
// Store from New on any client but a *redis.ClusterClient, and until the
// store's first slot table arrives: the Limiter's one breaker serves the
// key.
func (s *Store) Partition(key string) int {
	t := s.slotTable()
	if t == nil {
		return -1
	}
	if i := t.node[slot(key)]; i != noNode && t.ids[i] != noNode {
		return int(t.ids[i])
	}
	return -1
}

// PartitionName returns the address of the master of part, as the slot
// table last read it, or "" when it has none.
func (s *Store) PartitionName(part int) string {
	if t := s.slotTable(); t != nil {
		for i, id := range t.ids {
			if int(id) == part {
				return t.addrs[i]
			}
		}
	}
	return ""
}

// slotTable returns the store's slot table for Partition, or nil: none yet,
// or not a Cluster's store.
func (s *Store) slotTable() *slotTable {
	switch {
	case s.dialed != nil:
		return s.dialed.nodes.table.Load()
	case s.parts != nil:
		return s.parts.load()
	}
	return nil
}

// shard identifies where a key lives: its slot on a cluster, its hash tag on
// a ring. Keys of one shard may share one script or multi-key command.
type shard struct {
	slot int
	tag  string
}

func (s *Store) shardOf(key string) shard {
	if s.shardingNow() == byTag {
		return shard{tag: ikeys.HashTag(key)}
	}
	return shard{slot: slot(key)}
}

// group partitions 0..n-1 by the shard of key(i), in order: the ops or keys
// that can share one script or command.
func (s *Store) group(n int, key func(i int) string) [][]int {
	var shards []shard
	var groups [][]int
	for i := range n {
		sh := s.shardOf(key(i))
		g := indexOf(shards, sh)
		if g < 0 {
			shards = append(shards, sh)
			groups = append(groups, nil)
			g = len(groups) - 1
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

func indexOf(shards []shard, sh shard) int {
	for i := range shards {
		if shards[i] == sh {
			return i
		}
	}
	return -1
}
