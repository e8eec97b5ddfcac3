package ratelimit_test

import (
	"context"
	"errors"
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

// waitingStore is a context-bounded store whose Eval waits for its context
// to end when wait is set, and records what each call's context said.
type waitingStore struct {
	ratelimit.Store
	wait                 bool
	errAtStart, errAtEnd error
	value                any
}

type ctxKey struct{}

func (s *waitingStore) ContextBounded() bool { return true }

func (s *waitingStore) Eval(ctx context.Context, m ratelimit.Mode, ops []ratelimit.Op) ([]ratelimit.OpResult, error) {
	s.errAtStart, s.value = ctx.Err(), ctx.Value(ctxKey{})
	select {
	case <-ctx.Done():
		s.errAtEnd = ctx.Err()
		return nil, ctx.Err()
	default:
	}
	if s.wait {
		<-ctx.Done()
		s.errAtEnd = ctx.Err()
		return nil, ctx.Err()
	}
	s.errAtEnd = ctx.Err()
	return s.Store.Eval(ctx, m, ops)
}

// TestStoreCallTimeoutReused: the per-check timeout of a caller's context
// that can never be canceled (reused from check to check) ends a store call
// at the timeout with context.DeadlineExceeded, carries the caller's values,
// and a check after one that timed out gets a context that has not ended.
// The reused contexts are pooled for every Limiter, so the checks that must
// succeed run on a Limiter of their own whose timeout (an hour) no stall of a
// loaded machine reaches: with the short one they failed when the goroutine
// was descheduled for its 20ms (seen under -race, one run in about 1200).
func TestStoreCallTimeoutReused(t *testing.T) {
	s := &waitingStore{Store: ratelimit.NewMemoryStore()}
	newLimiter := func(timeout time.Duration) *ratelimit.Limiter {
		t.Helper()
		// No breaker: the short one's timeouts in a row would open it, and its
		// prober would call the store beside the test.
		l, err := ratelimit.New(ratelimit.Config{Name: "timeout", Store: s, Rules: []ratelimit.Rule{basic("r")}, Timeout: timeout,
			Breaker: ratelimit.BreakerConfig{Failures: -1}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	short, long := newLimiter(20*time.Millisecond), newLimiter(time.Hour)
	id := ratelimit.Identifier{"user": "u"}
	ctx := context.WithValue(context.Background(), ctxKey{}, "v") // no Done channel
	for i := range 3 {
		s.wait = true
		r := short.Check(ctx, id)
		if !errors.Is(r.Err, context.DeadlineExceeded) || !errors.Is(s.errAtEnd, context.DeadlineExceeded) {
			t.Fatalf("round %d: a store call past the timeout: check error %v, store saw %v; want context.DeadlineExceeded", i, r.Err, s.errAtEnd)
		}
		for range 5 { // reused contexts: none has ended
			s.wait = false
			if r := long.Check(ctx, id); r.Err != nil || s.errAtStart != nil || s.errAtEnd != nil {
				t.Fatalf("round %d: check after a timeout: %v; store saw %v at the start, %v at the end", i, r.Err, s.errAtStart, s.errAtEnd)
			}
			if s.value != "v" {
				t.Fatalf("round %d: store saw the value %v, want the caller's", i, s.value)
			}
		}
	}
}
