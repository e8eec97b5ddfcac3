package ratelimit

import (
	"strconv"
	"testing"
	"time"
)

// TestSweepBounded: one round of the background sweep examines at most
// sweepPerShard entries of a shard, and gives back the table of a shard that
// emptied.
func TestSweepBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	fill := func(sh *memShard, n int, expire time.Time) {
		for i := range n {
			sh.m["k"+strconv.Itoa(len(sh.m))+"_"+strconv.Itoa(i)] = &memEntry{expire: expire}
		}
	}
	t.Run("expired: a bounded share per round", func(t *testing.T) {
		sh := &memShard{m: map[string]*memEntry{}}
		fill(sh, 10*sweepPerShard, now)
		left := sh.sweepBounded(now)
		if want := 9 * sweepPerShard; left != want || len(sh.m) != want {
			t.Fatalf("one round left %d (len %d), want %d: it must drop exactly its share", left, len(sh.m), want)
		}
		for rounds := 1; sh.sweepBounded(now) > 0; rounds++ {
			if rounds > 10 {
				t.Fatal("more than ten rounds to empty ten rounds' share")
			}
		}
		if sh.peak != 0 {
			t.Fatalf("peak = %d after the shard emptied, want 0: its table was kept", sh.peak)
		}
	})
}
