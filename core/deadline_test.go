package ratelimit_test

import (
	"context"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// deadlineStore is a context-bounded store that records the deadline of the
// context each call gets.
type deadlineStore struct {
	ratelimit.Store
	deadline time.Time
	has      bool
}

func (s *deadlineStore) ContextBounded() bool { return true }

func (s *deadlineStore) Eval(ctx context.Context, m ratelimit.Mode, ops []ratelimit.Op) ([]ratelimit.OpResult, error) {
	s.deadline, s.has = ctx.Deadline()
	return s.Store.Eval(ctx, m, ops)
}

// TestStoreCallDeadline: a store call is always bounded by the per-check
// timeout; a caller's earlier deadline is passed through as it is.
func TestStoreCallDeadline(t *testing.T) {
	s := &deadlineStore{Store: ratelimit.NewMemoryStore()}
	l, err := ratelimit.New(ratelimit.Config{Name: "deadline", Store: s, Rules: []ratelimit.Rule{basic("r")}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	id := ratelimit.Identifier{"user": "u"}

	early, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want, _ := early.Deadline()
	if r := l.Check(early, id); r.Err != nil {
		t.Fatal(r.Err)
	}
	if !s.has || !s.deadline.Equal(want) {
		t.Fatalf("caller's earlier deadline: store saw %v (set %v), want %v", s.deadline, s.has, want)
	}

	before := time.Now()
	if r := l.Check(context.Background(), id); r.Err != nil {
		t.Fatal(r.Err)
	}
	if !s.has || s.deadline.Before(before.Add(time.Hour)) {
		t.Fatalf("no caller deadline: store saw %v (set %v), want the per-check timeout, after %v", s.deadline, s.has, before.Add(time.Hour))
	}

	late, cancel2 := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel2()
	before = time.Now()
	if r := l.Check(late, id); r.Err != nil {
		t.Fatal(r.Err)
	}
	if lateDL, _ := late.Deadline(); !s.has || !s.deadline.Before(lateDL) || s.deadline.Before(before.Add(time.Hour)) {
		t.Fatalf("caller's later deadline: store saw %v, want the per-check timeout", s.deadline)
	}
}
