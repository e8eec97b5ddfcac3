package ratelimit

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

const (
	// DefaultBlockedCacheSize is the default of BlockedCacheConfig.Size.
	DefaultBlockedCacheSize = 10000
	// DefaultBlockedCacheMaxAge is the default of BlockedCacheConfig.MaxAge.
	DefaultBlockedCacheMaxAge = time.Second
)

// BlockedCacheConfig configures the process-local cache of blocked counters of
// a Limiter.
//
// When a check finds a limit rule's counter banned (or, with OverLimit, over
// its limit), the Limiter remembers the counter key until the ban or window
// ends. Later checks of that counter are answered block without the store:
// a banned client hammering costs a map lookup, not a round trip. Counting
// rules evaluated before the cached rule (log rules, earlier limit rules) still
// go to the store; the cached rule itself is never sent, so a client is never
// charged past a rule known to block it.
//
// Staleness: the cache is dropped when the rules change (SetRules) and a
// counter's entry when Clear runs in this process. A Clear (or a deleted key)
// in another process, such as `ratekit clear` or the admin page's "lift ban",
// is seen when the entry ages out: after MaxAge (default one second), or at
// the reset when MaxAge is negative. Each entry thus costs a hammering client
// at most one store call per MaxAge instead of one per check (the check that
// refreshes an aged-out entry fails open like any other when the store is
// down; the others keep the cached block until the reset). A cached answer
// reports the count the store last gave (a banned counter's count drops
// to 0 once the counter has certainly emptied: a period after the ban was
// seen, two for a sliding window, the time its burst takes to come back for
// a token bucket; it may have emptied earlier).
type BlockedCacheConfig struct {
	// Size caps the entries (default DefaultBlockedCacheSize; -1 disables
	// the cache), rounded up to a multiple of 16: the cache is 16 shards of
	// at most ceil(Size/16) entries each, so Size 1 holds up to 16. A full
	// shard drops the expired entries among up to 1,024 it examines (at most
	// once a second), then arbitrary ones.
	Size int
	// MaxAge is how long an entry answers before the store is asked again
	// (default DefaultBlockedCacheMaxAge; negative: until the ban or window
	// ends). It bounds how late a Clear in another process is seen.
	MaxAge time.Duration
	// OverLimit also caches limit rules that are over their limit without a
	// ban, until their window ends (a sliding window or a token bucket: until
	// the blocked check would pass, and for checks of at least its cost,
	// since one of a lower cost may pass sooner). Off by default: a counter
	// over its limit is cheap to re-check, and another process may clear it.
	OverLimit bool
}

const blockShards = 16

// blockCache maps counter keys to the time their block ends. It is sharded by
// a hash of the key so that concurrent checks rarely share a lock.
type blockCache struct {
	// First, so that no shard shares a cache line with the fields below,
	// which every check reads (n).
	shards    [blockShards]blockShard
	seed      maphash.Seed
	perShard  int
	maxAge    time.Duration // <0: until the reset
	overLimit bool
	n         atomic.Int64  // entries in all shards: zero skips the lookup
	gen       atomic.Uint64 // bumped by every invalidation; see put
}

type blockShard struct {
	mu        sync.RWMutex
	m         map[string]blockEntry
	nextSweep time.Time
	// Pad the fields above to 128 bytes (TestBlockShardLayout): each shard
	// has two cache lines of its own, as a memShard, so that the lookups of
	// one shard (its read lock is a write to its line) never slow another's.
	_ [128 - blockShardFields%128]byte
}

// blockShardFields is the size of blockShard's fields, before its padding.
const blockShardFields = unsafe.Sizeof(sync.RWMutex{}) + unsafe.Sizeof(map[string]blockEntry(nil)) + unsafe.Sizeof(time.Time{})

type blockEntry struct {
	until time.Time // the reset the store reported (ResetAt)
	fresh time.Time // the entry answers until then: until, or sooner by MaxAge
	// refresh: a check asks the store for the aged-out entry; until then the
	// others keep answering from it.
	refresh time.Time
	// window bounds when a banned counter is certainly empty (see
	// emptyWithin): nothing counts while banned, so past window its count
	// is 0.
	window time.Time
	limit  int64 // the limit the counter exceeded (over-limit entries)
	// cost is the blocked check's cost (over-limit entries): a sliding
	// window or a token bucket rejects by cost, without charging it.
	cost   float64
	count  float64
	banned bool
}

func newBlockCache(cfg BlockedCacheConfig) *blockCache {
	size := cfg.Size
	if size < 0 {
		return nil
	}
	if size == 0 {
		size = DefaultBlockedCacheSize
	}
	// ceil(size/blockShards), without the sum that overflows near the largest int
	perShard := size/blockShards + btoi(size%blockShards != 0)
	c := &blockCache{seed: maphash.MakeSeed(), perShard: perShard, overLimit: cfg.OverLimit, maxAge: cfg.MaxAge}
	if c.maxAge == 0 {
		c.maxAge = DefaultBlockedCacheMaxAge
	}
	for i := range c.shards {
		c.shards[i].m = make(map[string]blockEntry)
	}
	return c
}

func (c *blockCache) shard(key string) *blockShard {
	return &c.shards[maphash.String(c.seed, key)%blockShards]
}

// any reports whether the cache holds an entry: small enough to inline, so
// that a check pays no call while nothing is blocked.
func (c *blockCache) any() bool { return c != nil && c.n.Load() != 0 }

// get returns the entry of op's counter when it still blocks op at now.
func (c *blockCache) get(op *Op, now time.Time) (blockEntry, bool) {
	if c == nil || c.n.Load() == 0 {
		return blockEntry{}, false
	}
	sh := c.shard(op.Key)
	sh.mu.RLock()
	e, ok := sh.m[op.Key]
	sh.mu.RUnlock()
	if !ok || !now.Before(e.until) {
		return blockEntry{}, false
	}
	if !now.Before(e.fresh) && !c.claimRefresh(sh, op.Key, now) {
		// Aged out: this check asks the store. Concurrent checks of the same
		// counter keep the cached answer meanwhile, so that a hammering crowd
		// sends one store call per MaxAge, not one each.
		return blockEntry{}, false
	}
	if e.banned {
		if !now.Before(e.window) {
			e.count = 0
		}
		// The store consults a ban only for a rule that still bans.
		return e, op.BanKey != ""
	}
	// A counter only grows within its window: over a limit it stays over any
	// lower one. A raised limit asks the store again. A sliding window or a
	// token bucket is not charged for the checks it rejects, and admits a
	// cheaper check sooner than the one it blocked: a lower cost asks again.
	return e, op.Limit <= e.limit && (op.Kind < OpSliding || op.Cost >= e.cost)
}

// claimRefresh reports whether the cached answer of key still stands (it was
// refilled meanwhile, or another check refreshes it); if not, the caller
// becomes the refresher and asks the store. A refresh that
// never reports (the store failed) is retried after another MaxAge.
func (c *blockCache) claimRefresh(sh *blockShard, key string, now time.Time) (taken bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key]
	if !ok {
		return false
	}
	if now.Before(e.fresh) || now.Before(e.refresh) {
		return true // refilled meanwhile, or another check refreshes it
	}
	e.refresh = now.Add(c.maxAge)
	sh.m[strings.Clone(key)] = e // key may be a check's borrowed key: a map keeps the key of every assignment
	return false
}

// drop removes the entry of a counter the store found not blocking (the ban
// was lifted elsewhere, or a rule changed), so that no check answers from it.
func (c *blockCache) drop(key string) {
	if c == nil || c.n.Load() == 0 {
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	if _, ok := sh.m[key]; ok {
		delete(sh.m, key)
		c.n.Add(-1)
	}
	sh.mu.Unlock()
}

// generation is read before a store call; put refuses an entry whose check
// started before an invalidation, so a Clear is never undone by a check that
// was in flight when it ran.
func (c *blockCache) generation() uint64 { return c.gen.Load() }

// put records that op's counter blocks until until, if the outcome qualifies.
func (c *blockCache) put(gen uint64, op *Op, out *OpResult, until time.Time, now time.Time) {
	if (out.Banned && op.BanKey == "") || (!out.Banned && !c.overLimit) {
		c.drop(op.Key) // not cacheable: an older entry (a ban now over) must not answer
		return
	}
	sh := c.shard(op.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c.gen.Load() != gen {
		return
	}
	if _, ok := sh.m[op.Key]; !ok {
		if len(sh.m) >= c.perShard {
			c.makeRoom(sh, now)
		}
		c.n.Add(1)
	}
	fresh := until
	if c.maxAge > 0 && now.Add(c.maxAge).Before(fresh) {
		fresh = now.Add(c.maxAge)
	}
	sh.m[strings.Clone(op.Key)] = blockEntry{until: until, fresh: fresh, window: now.Add(emptyWithin(op)), limit: op.Limit, cost: op.Cost, count: out.Count, banned: out.Banned}
}

// emptyWithin bounds the time a counter that nothing charges takes to be
// empty: a fixed window (or a distinct set) ends within its period; a
// sliding window's count weighs its previous window for a period more; a
// token bucket is full again once its burst came back, at limit a period.
func emptyWithin(op *Op) time.Duration {
	switch {
	case op.Kind == OpSliding:
		return addDurations(op.Period, op.Period)
	case op.Kind == OpTokenBucket && op.Limit > 0 && op.Burst > 0:
		return ceilDuration(float64(op.Period) / float64(op.Limit) * float64(op.Burst))
	}
	return op.Period
}

// makeRoom frees at least one entry of a full shard: the expired ones among
// at most sweepPerShard it examines (at most once a second, so that a shard
// full of live entries is not scanned on every insert; a bounded share, as
// the memory store's sweeps, so that the lookups of a large shard never wait
// for a scan of all of it), else an arbitrary one.
func (c *blockCache) makeRoom(sh *blockShard, now time.Time) {
	if !now.Before(sh.nextSweep) {
		sh.nextSweep = now.Add(time.Second)
		examined := 0
		for k, e := range sh.m { // from a random place: each sweep looks somewhere else
			if examined == sweepPerShard {
				break
			}
			examined++
			if !now.Before(e.until) {
				delete(sh.m, k)
				c.n.Add(-1)
			}
		}
	}
	for k := range sh.m {
		if len(sh.m) < c.perShard {
			break
		}
		delete(sh.m, k)
		c.n.Add(-1)
	}
}

// remove drops the entries of keys (a local Clear).
func (c *blockCache) remove(keys []string) {
	if c == nil {
		return
	}
	c.gen.Add(1)
	for _, k := range keys {
		c.drop(k)
	}
}

// reset drops every entry (the rules changed).
func (c *blockCache) reset() {
	if c == nil {
		return
	}
	c.gen.Add(1)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		c.n.Add(-int64(len(sh.m)))
		clear(sh.m)
		sh.mu.Unlock()
	}
}

// BlockedCacheLen returns the number of entries of the limiter's blocked-counter cache
// (expired ones included until they are dropped); 0 when it is disabled.
func (l *Limiter) BlockedCacheLen() int {
	if l.blocked == nil {
		return 0
	}
	return int(l.blocked.n.Load())
}
