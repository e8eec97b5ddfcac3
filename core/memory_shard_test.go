package ratelimit

import (
	"math"
	"testing"
	"time"
	"unsafe"
)

// TestShardFromMatchesShard proves that the shortcut a Limiter gives the memory
// store (where the hash tag of its keys starts) picks the shard that the tag
// found from scratch picks, for every kind of key a check builds: counters,
// bans and distinct sets, with values that escaping changes or hashes. A
// mismatch would split a counter from its ban, or hide a key from Delete.
func TestShardFromMatchesShard(t *testing.T) {
	s := MemoryConfig{Shards: 1024}.New()
	rules := []Rule{
		{Name: "plain", Characteristics: []string{"user"}, Limit: 1, Period: time.Hour},
		{Name: "banned", Characteristics: []string{"user", "ip"}, Limit: 1, Period: time.Hour, BanFor: time.Minute},
		{Name: "distinct", Characteristics: []string{"ip"}, CountDistinct: "user", Limit: 1, Period: time.Hour},
		{Name: "missing", Characteristics: []string{"absent"}, CountMissing: true, Limit: 1, Period: time.Hour},
	}
	ids := []Identifier{
		{"user": "u", "ip": "2001:db8::1"},
		{"user": "{}:=%!# \x00\xff}", "ip": 42},
		{"user": string(make([]byte, 500)), "ip": "}{"},
	}
	for _, prefix := range []string{"", "app}:", "a{b}:"} {
		l, err := New(Config{Name: "shards", Store: s, KeyPrefix: prefix, Rules: rules})
		if err != nil {
			t.Fatal(err)
		}
		if (l.tagFrom == 0) != (prefix == "a{b}:") {
			t.Fatalf("prefix %q: tagFrom %d", prefix, l.tagFrom)
		}
		for _, id := range ids {
			for _, k := range l.Keys(id) {
				if got, want := s.shardFrom(k, l.tagFrom), s.shard(k); got != want {
					t.Errorf("prefix %q: key %q: shardFrom picks shard %p, shard picks %p", prefix, k, got, want)
				}
			}
		}
	}
}

// TestMemShardSize keeps the padding of memShard in step with its fields: a
// multiple of 128 bytes, so that no two shards share a cache line (or an
// adjacent pair of them).
func TestMemShardSize(t *testing.T) {
	if n := unsafe.Sizeof(memShard{}); n%128 != 0 {
		t.Fatalf("memShard is %d bytes, want a multiple of 128: adjust its padding", n)
	}
}

// TestShardsBounded: MemoryConfig.Shards is rounded up to a power of two
// and capped, so that a large setting neither overflows the rounding (a
// panic) nor allocates shards by the billion.
func TestShardsBounded(t *testing.T) {
	tests := []struct{ shards, want int }{
		{0, 64}, {-5, 64}, {1, 1}, {3, 4}, {64, 64}, {maxShards, maxShards},
		{maxShards + 1, maxShards}, {1 << 40, maxShards}, {math.MaxInt, maxShards},
	}
	for _, tt := range tests {
		if got := len(MemoryConfig{Shards: tt.shards}.New().shards); got != tt.want {
			t.Errorf("Shards %d: %d shards, want %d", tt.shards, got, tt.want)
		}
	}
}
