package ratelimit

import (
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// TestBlockShardLayout keeps the blocked cache's shards on cache lines of
// their own, as the memory store's (TestMemShardSize): a shard is a multiple
// of 128 bytes, and the shards come first in the cache, so that no shard's
// lock shares a line (or an adjacent pair of them) with another shard's or
// with the entry count every check reads.
func TestBlockShardLayout(t *testing.T) {
	var c blockCache
	if n := unsafe.Sizeof(blockShard{}); n%128 != 0 {
		t.Errorf("blockShard is %d bytes, want a multiple of 128: adjust its padding", n)
	}
	if off := unsafe.Offsetof(c.shards); off%128 != 0 {
		t.Errorf("the shards start at byte %d of blockCache, want a multiple of 128", off)
	}
}

// TestBlockCacheMakeRoomBounded: making room in a full shard examines at
// most sweepPerShard of its entries for expired ones, however large the
// cache's Size makes a shard, so that no insert holds the shard's lock (and
// every lookup of it) for a scan of the whole shard. Every entry has
// expired, so each one examined is dropped: the entries dropped are the
// entries examined.
func TestBlockCacheMakeRoomBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const perShard = 20 * sweepPerShard
	c := newBlockCache(BlockedCacheConfig{Size: blockShards * perShard})
	op := Op{Kind: OpCount, Key: "{new}", BanKey: "{new}:ban", Cost: 1, Limit: 1, Period: time.Minute}
	sh := c.shard(op.Key)
	for i := range perShard {
		sh.m["{k}"+strconv.Itoa(i)] = blockEntry{until: now}
	}
	c.n.Store(perShard)
	c.put(c.generation(), &op, &OpResult{Banned: true, Exceeded: true, TTL: time.Minute}, now.Add(time.Minute), now)
	if _, ok := sh.m[op.Key]; !ok {
		t.Fatal("the new entry was not stored")
	}
	examined := perShard + 1 - len(sh.m)
	if examined == 0 || examined > sweepPerShard {
		t.Fatalf("making room examined %d of %d entries, want 1 to %d", examined, perShard, sweepPerShard)
	}
	if n := c.n.Load(); n != int64(len(sh.m)) {
		t.Fatalf("the cache counts %d entries, its shard holds %d", n, len(sh.m))
	}
}
