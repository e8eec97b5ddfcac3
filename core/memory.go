package ratelimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ratekit/ratekit/internal/keys"
)

// MemoryStore is the embedded Store: counters in this process only. It suits a
// single process, tests and the quickstart; use redisstore for a fleet.
//
// Keys are spread over independently locked shards by their hash tag, so a
// counter and its ban live in one shard. The usual charge (a counter that
// exists, no ban) takes its shard's lock for reading only and adds
// atomically, so concurrent checks of one busy key, or of keys sharing a
// shard, do not queue on the lock; creating, expiring and banning take it
// for writing. Expired entries are dropped when read, swept from a shard
// while it is being written (once per sweep interval, and each time it
// grew by 128 entries), and reclaimed in the background from shards that
// nothing writes any more (see Close); every sweep examines at most 1,024
// entries of a shard, 128 at a time under its lock, so memory stays bounded
// by the keys live within their windows and no sweep stalls a shard.
//
// Build it with NewMemoryStore or MemoryConfig.New: the zero value is not
// usable, and New refuses it.
type MemoryStore struct {
	now    func() time.Time
	seed   maphash.Seed
	shards []memShard
	mask   uint64 // len(shards)-1: a power of two
	sweep  time.Duration
	// realClock: now is the real clock (see now), so a Limiter on it can
	// hand the store the time it already read.
	realClock bool
	janitor   janitor
}

var _ Store = (*MemoryStore)(nil)

type memShard struct {
	mu        sync.RWMutex // read-held by evalHot, write-held by everything else
	m         map[string]*memEntry
	nextSweep time.Time // when a check next sweeps the shard (see sweepDue)
	swept     int       // len(m) after the last sweep
	peak      int       // the largest len(m) a sweep saw (see shrink)
	// Pad the fields above to 128 bytes (TestMemShardSize): a shard then has
	// two cache lines of its own, also against adjacent-line prefetch, so
	// that checks on other shards never contend for its lines. Mutex profiles
	// of the read-locked hot path (evalHot) show the contention it removes on
	// many cores; a 2-core benchmark cannot show it.
	_ [128 - memShardFields%128]byte
}

// memShardFields is the size of memShard's fields, before its padding.
const memShardFields = unsafe.Sizeof(sync.RWMutex{}) + unsafe.Sizeof(map[string]*memEntry(nil)) + unsafe.Sizeof(time.Time{}) + 2*unsafe.Sizeof(0)

type memEntry struct {
	count  float64 // first: 64-bit aligned for evalHot's atomic adds on every platform
	set    map[string]struct{}
	expire time.Time
	prev   float64 // a sliding window's previous window count (memory_algo.go)
}

// MemoryConfig tunes a MemoryStore; its zero value gives NewMemoryStore's
// defaults. Build the store with New.
type MemoryConfig struct {
	// Now is the store's clock (for tests; default the real clock).
	Now func() time.Time
	// Shards is the number of lock shards, rounded up to a power of two,
	// at most 65536 (default 64).
	Shards int
	// SweepInterval is how often a written shard sweeps its expired entries
	// (also each time it grew by 128 entries), and how often the background
	// sweep reclaims expired entries of every shard (default one second).
	SweepInterval time.Duration
}

// maxShards bounds MemoryConfig.Shards: 65536 shards are 8 MiB of padded
// locks (and as many empty maps), far more than a machine has cores to
// contend for them. Unbounded, a large setting overflowed the rounding to a
// power of two (a panic) or allocated shards by the billion.
const maxShards = 1 << 16

// NewMemoryStore returns an empty in-process store with the default
// configuration: MemoryConfig{}.New().
func NewMemoryStore() *MemoryStore { return MemoryConfig{}.New() }

// New returns an empty in-process store configured by c.
func (c MemoryConfig) New() *MemoryStore {
	s := &MemoryStore{now: now, seed: maphash.MakeSeed(), sweep: time.Second, realClock: true}
	if c.Now != nil {
		s.now, s.realClock = c.Now, false
	}
	if c.SweepInterval > 0 {
		s.sweep = c.SweepInterval
	}
	n := 64
	if c.Shards > 0 {
		n = min(c.Shards, maxShards)
	}
	n = 1 << bits.Len(uint(n-1)) // a power of two: the shard is a mask of the hash
	s.shards = make([]memShard, n)
	s.mask = uint64(n - 1)
	for i := range s.shards {
		s.shards[i].m = make(map[string]*memEntry)
	}
	s.janitor.init(s)
	return s
}

func (s *MemoryStore) inProcess() {}

func (s *MemoryStore) shard(key string) *memShard {
	return s.shardOfTag(keys.HashTag(key))
}

func (s *MemoryStore) shardOfTag(tag string) *memShard {
	h := maphash.String(s.seed, tag)
	return &s.shards[h&s.mask]
}

// shardFrom is shard for a key whose hash tag is known to start at tagFrom
// (just after its '{') and to end at its last '}', as in every key a Limiter
// builds: finding the tag is then a short walk back from the end of the key
// instead of two scans from its start. tagFrom 0 means unknown.
func (s *MemoryStore) shardFrom(key string, tagFrom int) *memShard {
	if tagFrom > 0 {
		if e := strings.LastIndexByte(key, '}'); e > tagFrom {
			return s.shardOfTag(key[tagFrom:e])
		}
	}
	return s.shard(key)
}

// Len returns the number of live and not yet swept entries (for tests and metrics).
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// get returns the entry of key and the time it has left at now; an entry
// with none left is deleted and reads as absent. Checking the expiry by the
// time left (Sub, which uses the monotonic clock readings when both times
// have one, as Before does) hands the caller its TTL without a second clock
// computation.
func (sh *memShard) get(key string, now time.Time) (*memEntry, time.Duration) {
	e := sh.m[key]
	if e == nil {
		return nil, 0
	}
	ttl := e.expire.Sub(now)
	if ttl <= 0 {
		delete(sh.m, key)
		return nil, 0
	}
	return e, ttl
}

// sweepDue reports whether a check that wrote sh sweeps it (sweepBounded,
// once it released the lock): once per sweep interval, and whenever the
// shard grew by sweepBatch entries since its last sweep, so that expired
// entries are reclaimed as fast as new callers arrive, however many arrive
// per interval. Called with sh.mu held for writing.
func (sh *memShard) sweepDue(now time.Time, every time.Duration) bool {
	if now.Before(sh.nextSweep) && len(sh.m) < sh.swept+sweepBatch {
		return false
	}
	sh.nextSweep, sh.swept = now.Add(every), len(sh.m) // the checks beside this one do not sweep too
	return true
}

// Eval implements Store. A panic inside it (a bug) is returned as an error, so
// the limiter fails open; no shard lock is ever left held.
func (s *MemoryStore) Eval(ctx context.Context, mode Mode, ops []Op) ([]OpResult, error) {
	if err := CheckCosts(ops); err != nil {
		return nil, fmt.Errorf("ratelimit: memory store: %w", err)
	}
	return s.evalInto(ctx, mode, ops, make([]OpResult, len(ops)), time.Time{}, 0)
}

// evalInto is Eval writing into out (len(out) == len(ops)), so that the
// Limiter can hand it a reused buffer, and the current time when it has just
// read it from the same clock (else now is zero and each op reads the clock).
// tagFrom is where the hash tag of every op's key starts, when the Limiter
// knows it (see shardFrom), else 0.
func (s *MemoryStore) evalInto(ctx context.Context, mode Mode, ops []Op, out []OpResult, now time.Time, tagFrom int) (_ []OpResult, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	defer recoverStore(&err)
	clear(out)
	for i := range ops {
		op := &ops[i]
		s.shardFrom(op.Key, tagFrom).eval(s, now, mode, op, &out[i])
		if out[i].Count > maxCost {
			// Past 2^53 the float64 sum drops units that Redis counts
			// (MaxCount): reported as 2^53, as every Store reports it.
			out[i].Count = maxCost
		}
		if out[i].Exceeded && op.Terminal {
			break
		}
	}
	if mode == ModeCheck {
		s.janitor.wake() // one atomic load while the sweep is scheduled
	}
	return out, nil
}

// eval applies one op into *o (a zero OpResult): the common one through
// evalHot, any other under the shard's lock, released even if apply panics.
func (sh *memShard) eval(s *MemoryStore, now time.Time, mode Mode, op *Op, o *OpResult) {
	if now.IsZero() {
		now = s.now()
	}
	// evalHot knows one algorithm, the fixed window: an op counted any other
	// way must not reach it.
	if mode == ModeCheck && op.Kind == OpCount && op.BanKey == "" && op.Cost > 0 && sh.evalHot(now, op, o) {
		return
	}
	if sh.applyLocked(now, mode, op, o, s.sweep) {
		sh.sweepBounded(now) // bounded, and a batch at a time under the lock
	}
}

// applyLocked is apply under the shard's write lock, released even if apply
// panics, and reports whether a check is due to sweep the shard.
func (sh *memShard) applyLocked(now time.Time, mode Mode, op *Op, o *OpResult, every time.Duration) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.apply(now, mode, op, o)
	return mode == ModeCheck && sh.sweepDue(now, every)
}

// evalHot charges a fixed-window counter that exists and is live, the
// common op of a busy key, under the shard's read lock with an atomic add, so
// that the checks of one key (or of keys sharing the shard) never queue on
// the lock; apply, under the write lock, creates, expires, bans and
// replaces entries, so it never runs beside an add. It reports false, having
// changed nothing, when the op needs apply.
func (sh *memShard) evalHot(now time.Time, op *Op, o *OpResult) bool {
	sh.mu.RLock()
	e := sh.m[op.Key]
	if e == nil || e.set != nil {
		sh.mu.RUnlock()
		return false
	}
	ttl := e.expire.Sub(now)
	if ttl <= 0 {
		sh.mu.RUnlock()
		return false
	}
	count := addFloat(&e.count, op.Cost)
	sh.mu.RUnlock()
	o.Evaluated, o.Count, o.Exceeded, o.TTL = true, count, overLimit(count, op.Limit), ttl
	return true
}

// addFloat adds d to *f atomically and returns the sum.
func addFloat(f *float64, d float64) float64 {
	p := (*uint64)(unsafe.Pointer(f))
	for {
		old := atomic.LoadUint64(p)
		sum := math.Float64frombits(old) + d
		if atomic.CompareAndSwapUint64(p, old, math.Float64bits(sum)) {
			return sum
		}
	}
}

// apply evaluates op into *o, which is zero: written in place, an OpResult
// is not copied out of each call.
func (sh *memShard) apply(now time.Time, mode Mode, op *Op, o *OpResult) {
	if op.Kind >= OpSliding {
		sh.applyAlgorithm(now, mode, op, o)
		return
	}
	o.Evaluated = true
	e, ttl := sh.get(op.Key, now)
	if e != nil && (e.set != nil) != (op.Kind == OpDistinct) {
		// A value of the other counting kind: keys encode the kind, so only a
		// caller that built its own keys gets here. It reads as absent and a
		// check replaces it (as the Redis store does); never a crash.
		if mode == ModeCheck {
			delete(sh.m, op.Key)
		}
		e = nil
	}
	if e == nil {
		ttl = op.Period // no window yet, or one this check starts (now+Period)
	}
	if op.BanKey != "" {
		if b, left := sh.get(op.BanKey, now); b != nil {
			o.Banned, o.Exceeded, o.TTL = true, true, left
			if e != nil {
				o.Count = e.count
				if op.Kind == OpDistinct {
					o.Count = float64(len(e.set))
				}
			}
			return
		}
	}
	charge := mode == ModeCheck && op.Cost > 0
	would := 0.0
	switch op.Kind {
	case OpCount:
		if e != nil {
			o.Count = e.count
		}
		if charge {
			if e == nil {
				e = &memEntry{expire: now.Add(op.Period)}
				sh.m[strings.Clone(op.Key)] = e // the limiter lends its keys
			}
			e.count += op.Cost
			o.Count = e.count
			would = o.Count
		} else {
			would = o.Count
			if mode == ModePeek {
				would += op.Cost
			}
		}
	case OpDistinct:
		has := false
		if e != nil {
			o.Count = float64(len(e.set))
			_, has = e.set[op.Member]
		}
		if charge {
			if e == nil {
				e = &memEntry{expire: now.Add(op.Period), set: map[string]struct{}{}}
				sh.m[strings.Clone(op.Key)] = e
			}
			would = o.Count
			switch {
			case has:
			case len(e.set) <= int(min(op.Limit, math.MaxInt32)):
				e.set[strings.Clone(op.Member)] = struct{}{} // the caller's may hold a larger string
				o.Count = float64(len(e.set))
				would = o.Count
			default:
				// Over its limit the set stays exceeded whatever is added: it
				// stops growing, so a client cannot inflate it.
				would++
			}
		} else {
			would = o.Count
			if mode == ModePeek && op.Cost > 0 && !has {
				would++
			}
		}
	}
	o.Exceeded = overLimit(would, op.Limit)
	o.TTL = ttl
	if charge && o.Exceeded && op.BanFor > 0 && op.BanKey != "" {
		sh.m[strings.Clone(op.BanKey)] = &memEntry{expire: now.Add(op.BanFor)}
		o.Banned, o.TTL = true, op.BanFor
	}
}

// Delete implements Store.
func (s *MemoryStore) Delete(ctx context.Context, keys []string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n := 0
	now := s.now()
	for _, k := range keys {
		sh := s.shard(k)
		sh.mu.Lock()
		if e, _ := sh.get(k, now); e != nil {
			delete(sh.m, k)
			n++
		}
		sh.mu.Unlock()
	}
	return n, nil
}
