package ratelimit_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// heapBytes returns the live heap after a full collection.
func heapBytes() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemoryStoreReclaimsWhenIdle: 200,000 distinct users, then no check at
// all once their window has ended. No write reaches their shards again, so
// only the background sweep can give the memory back; it must, and Close
// stops it (goleak, in TestMain, finds any round left running).
func TestMemoryStoreReclaimsWhenIdle(t *testing.T) {
	const users = 200_000
	clk := &manualClock{now: time.Unix(1_800_000_000, 0)}
	store := ratelimit.MemoryConfig{Now: clk.Now, SweepInterval: 10 * time.Millisecond}.New()
	defer store.Close()
	l, err := ratelimit.New(ratelimit.Config{Name: "idle", Store: store, Now: clk.Now,
		Rules: []ratelimit.Rule{{Name: "per_user", Characteristics: []string{"user"}, Limit: 10, Period: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	base := heapBytes()
	for i := range users {
		l.Check(ctx, ratelimit.Identifier{"user": "user:" + strconv.Itoa(i)})
	}
	held := heapBytes() - min(base, heapBytes())
	if held < 8<<20 {
		t.Fatalf("%d users hold %d bytes: too few for this test to measure anything", users, held)
	}
	if n := store.Len(); n != users {
		t.Fatalf("Len = %d within the window, want %d: entries were dropped while live", n, users)
	}

	clk.Add(2 * time.Minute) // every window ends; nothing checks any more
	deadline := time.Now().Add(30 * time.Second)
	for store.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d expired entries still held 30s after their window ended", store.Len(), users)
		}
		time.Sleep(10 * time.Millisecond)
	}
	after := heapBytes()
	if after > base && after-base > held/8 {
		t.Fatalf("heap %d bytes above the start after the sweep, with %d bytes held by the entries: not reclaimed", after-base, held)
	}
	t.Logf("200,000 users: %.1f MB held within the window, %.1f MB after the background sweep",
		float64(held)/(1<<20), float64(int64(after)-int64(base))/(1<<20))
}

// TestMemoryStoreCloseStopsTheSweep: after Close no round runs again, even
// with expired entries left, and the store still counts.
func TestMemoryStoreCloseStopsTheSweep(t *testing.T) {
	clk := &manualClock{now: time.Unix(1_800_000_000, 0)}
	store := ratelimit.MemoryConfig{Now: clk.Now, SweepInterval: time.Millisecond}.New()
	l, err := ratelimit.New(ratelimit.Config{Name: "closed", Store: store, Now: clk.Now,
		Rules: []ratelimit.Rule{{Name: "r", Characteristics: []string{"user"}, Limit: 1, Period: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l.Check(ctx, ratelimit.Identifier{"user": "a"})
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	time.Sleep(20 * time.Millisecond) // twenty intervals: a sweep would have run
	if n := store.Len(); n != 1 {
		t.Fatalf("Len = %d after Close, want 1: a sweep ran after Close", n)
	}
	if r := l.Check(ctx, ratelimit.Identifier{"user": "b"}); r.Err != nil || r.Count() != 1 {
		t.Fatalf("check after Close: %+v", r)
	}
}
