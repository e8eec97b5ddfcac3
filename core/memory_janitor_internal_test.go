package ratelimit

import (
	"context"
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

// Close stops the background sweep for good, whatever the scheduler does: a
// round whose timer fired as Close ran sweeps nothing and schedules nothing,
// and a check's wake after Close schedules no round. (The external test of
// Close waits a few intervals, which a loaded machine may not give it.)
func TestJanitorStaysClosed(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := MemoryConfig{Now: func() time.Time { return now }, SweepInterval: time.Hour}.New()
	s.shards[0].m["k"] = &memEntry{expire: now} // expired at now
	s.janitor.wake()
	if s.janitor.idle.Load() || s.janitor.timer == nil {
		t.Fatal("wake scheduled no round")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.janitor.round() // as a timer that fired during Close runs it
	s.janitor.wake()
	if n := s.Len(); n != 1 {
		t.Fatalf("Len = %d after a round past Close, want 1: it swept", n)
	}
	if s.janitor.timer.Stop() {
		t.Fatal("a round is scheduled after Close")
	}
}

// TestWriteSweepBounded: the sweep a check runs on the shard it writes
// examines at most sweepPerShard entries, however many the shard holds, so
// that it never holds the shard's lock for a whole scan of a large map. Every
// entry of the shard has expired, so each one the sweep examines is dropped:
// the entries dropped are the entries examined.
func TestWriteSweepBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const held = 20 * sweepPerShard
	s := MemoryConfig{Now: func() time.Time { return now }, Shards: 1, SweepInterval: time.Hour}.New()
	if err := s.Close(); err != nil { // no background sweep: only the check's
		t.Fatal(err)
	}
	for i := range held {
		s.shards[0].m["{k}"+strconv.Itoa(i)] = &memEntry{expire: now}
	}
	op := Op{Kind: OpCount, Key: "{new}", Cost: 1, Limit: 10, Period: time.Minute}
	if _, err := s.Eval(context.Background(), ModeCheck, []Op{op}); err != nil {
		t.Fatal(err)
	}
	examined := held + 1 - s.Len()
	if examined == 0 || examined > sweepPerShard {
		t.Fatalf("the check's sweep examined %d of %d entries, want 1 to %d", examined, held, sweepPerShard)
	}
}
