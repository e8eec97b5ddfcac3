package ratelimit_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// TestMemoryStoreConcurrentChargesAllCount: checks of one hot key charge it
// under the shard's read lock while other checks create keys in the same
// shards and the background sweep runs; not one charge may be lost, and the
// limit still admits exactly its number.
func TestMemoryStoreConcurrentChargesAllCount(t *testing.T) {
	store := ratelimit.MemoryConfig{Shards: 1, SweepInterval: time.Millisecond}.New() // one shard: every key meets the hot one
	defer store.Close()
	const workers, checks, limit = 8, 2000, 6000
	l, err := ratelimit.New(ratelimit.Config{Name: "hot", Store: store,
		Rules: []ratelimit.Rule{{Name: "per_user", Characteristics: []string{"user"}, Limit: limit, Period: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	hot := ratelimit.Identifier{"user": "hot"}
	var wg sync.WaitGroup
	allowed := make([]int, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range checks {
				if r := l.Check(ctx, hot, ratelimit.Cost(0.5)); !r.Blocked() {
					allowed[w]++
				}
				if i%10 == 0 { // a new key: the write lock, between the hot charges
					l.Check(ctx, ratelimit.Identifier{"user": strconv.Itoa(w) + "/" + strconv.Itoa(i)})
				}
			}
		})
	}
	wg.Wait()
	if got := l.Peek(ctx, hot, ratelimit.Cost(0)).Count(); got != workers*checks*0.5 {
		t.Fatalf("count = %v after %d charges of 0.5, want %v: charges were lost", got, workers*checks, workers*checks*0.5)
	}
	total := 0
	for _, n := range allowed {
		total += n
	}
	if total != 2*limit {
		t.Fatalf("%d checks of cost 0.5 allowed under a limit of %d, want %d", total, limit, 2*limit)
	}
}
