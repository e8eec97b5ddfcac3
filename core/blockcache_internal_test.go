package ratelimit

import (
	"testing"
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
