package ratelimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// BenchmarkCheckMemoryNewKeys: every check creates its counter (a caller
// not seen within the window), the path that sweeps the shard it writes.
// The clock moves 10µs a check, so a 100ms window holds about 10,000 live
// counters and the identifiers, reused every 50,000 checks, find theirs
// expired.
func BenchmarkCheckMemoryNewKeys(b *testing.B) {
	ids := make([]ratelimit.Identifier, 50_000)
	for i := range ids {
		ids[i] = ratelimit.Identifier{"user": "user:" + strconv.Itoa(i)}
	}
	clk := &manualClock{now: time.Unix(1_800_000_000, 0)}
	store := ratelimit.MemoryConfig{Now: clk.Now}.New()
	defer store.Close()
	l, err := ratelimit.New(ratelimit.Config{Name: "bench", Store: store, Now: clk.Now,
		Rules: []ratelimit.Rule{{Name: "per_user", Characteristics: []string{"user"}, Limit: 10, Period: 100 * time.Millisecond}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		clk.Add(10 * time.Microsecond)
		if r := l.Check(ctx, ids[i%len(ids)]); r.Err != nil || r.Count() != 1 {
			b.Fatalf("check %d: count %v, err %v: want a new counter", i, r.Count(), r.Err)
		}
	}
}

// TestMemoryStoreReclaimsUnderSteadyWrites: callers never seen before arrive
// faster than a bounded share of a shard per sweep interval can reclaim
// (5,000 a second into one shard, with no background sweep), and the shard
// still holds about the callers of one window: the checks that add entries
// sweep as they add them.
func TestMemoryStoreReclaimsUnderSteadyWrites(t *testing.T) {
	const perSecond, seconds = 5000, 10
	clk := &manualClock{now: time.Unix(1_800_000_000, 0)}
	store := ratelimit.MemoryConfig{Now: clk.Now, Shards: 1, SweepInterval: time.Second}.New()
	if err := store.Close(); err != nil { // only the checks sweep
		t.Fatal(err)
	}
	l, err := ratelimit.New(ratelimit.Config{Name: "steady", Store: store, Now: clk.Now,
		Rules: []ratelimit.Rule{{Name: "per_user", Characteristics: []string{"user"}, Limit: 10, Period: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	peak := 0
	for i := range perSecond * seconds {
		clk.Add(time.Second / perSecond)
		if r := l.Check(ctx, ratelimit.Identifier{"user": i}); r.Err != nil {
			t.Fatal(r.Err)
		}
		peak = max(peak, store.Len())
	}
	// perSecond counters are live at any time; the rest have expired.
	if peak > 5*perSecond/2 {
		t.Fatalf("the shard held %d entries for %d live ones", peak, perSecond)
	}
	t.Logf("%d live entries, at most %d held", perSecond, peak)
}
