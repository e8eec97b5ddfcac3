package ratelimit_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// partStore is a memory store in two parts, as a Redis Cluster of two
// masters: keys of values starting with "a" are on part 0, the others on
// part 1. While down holds a part, a call with a key on it fails.
type partStore struct {
	*ratelimit.MemoryStore
	down atomic.Int32 // the part that fails, or -1
}

func (s *partStore) Partition(key string) int {
	if strings.Contains(key, "=a") {
		return 0
	}
	return 1
}

func (s *partStore) PartitionName(p int) string { return []string{"node-a", "node-b"}[p] }

func (s *partStore) Eval(ctx context.Context, mode ratelimit.Mode, ops []ratelimit.Op) ([]ratelimit.OpResult, error) {
	for _, op := range ops {
		if int32(s.Partition(op.Key)) == s.down.Load() {
			return nil, errors.New("node down")
		}
	}
	return s.MemoryStore.Eval(ctx, mode, ops)
}

// A failed check counts against the breaker of each part of its keys (its
// error does not say which failed): a check with keys on both parts opens
// both. The breaker of the part that answers closes at its prober's first
// probe, which peeks that part's keys only, while the one of the part that
// fails stays open, and its checks fail open without a store call, until it
// answers again.
func TestBreakerPerPart(t *testing.T) {
	store := &partStore{MemoryStore: ratelimit.NewMemoryStore()}
	store.down.Store(-1)
	l, err := ratelimit.New(ratelimit.Config{
		Name: "lim", Store: store,
		Rules: []ratelimit.Rule{
			{Name: "per_user", Characteristics: []string{"user"}, Limit: 100, Period: time.Hour, Action: ratelimit.ActionLimit},
			{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 100, Period: time.Hour, Action: ratelimit.ActionLimit},
		},
		Breaker: ratelimit.BreakerConfig{Failures: 3, Cooldown: 20 * time.Millisecond},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	onA := ratelimit.Identifier{"user": "a1", "ip": "a2"}
	onB := ratelimit.Identifier{"user": "b1", "ip": "b2"}
	mixed := ratelimit.Identifier{"user": "a3", "ip": "b3"}
	store.down.Store(0)
	for i := range 3 {
		if r := l.Check(ctx, mixed); r.Err == nil || errors.Is(r.Err, ratelimit.ErrCircuitOpen) {
			t.Fatalf("check %d with a key on the part down: %v, want the store's error", i, r.Err)
		}
	}
	if got := l.BreakerState(); got != "open" {
		t.Fatalf("breaker %s after 3 failures, want open", got)
	}
	eventually(t, "the breaker of the part that answers closes", func() bool { return l.Check(ctx, onB).Err == nil })
	for _, id := range []ratelimit.Identifier{onA, mixed} {
		if r := l.Check(ctx, id); !errors.Is(r.Err, ratelimit.ErrCircuitOpen) {
			t.Fatalf("check %v while its part is down: %v, want ErrCircuitOpen", id, r.Err)
		}
	}
	if r := l.Check(ctx, onB); r.Err != nil || r.Count() != 2 {
		t.Fatalf("check on the part that answers: count %v, %v; want 2, counted", r.Count(), r.Err)
	}
	store.down.Store(-1)
	eventually(t, "the breaker of the part that came back closes", func() bool { return l.Check(ctx, onA).Err == nil })
	if got := l.BreakerState(); got != "closed" {
		t.Errorf("breaker %s after both parts answer, want closed", got)
	}
}
