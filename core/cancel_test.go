package ratelimit_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/testlog"
)

// waitStore answers only when the context ends, like a store whose caller
// went away mid-call.
type waitStore struct{ calls int }

func (s *waitStore) Eval(ctx context.Context, _ ratelimit.Mode, _ []ratelimit.Op) ([]ratelimit.OpResult, error) {
	s.calls++
	<-ctx.Done()
	return nil, ctx.Err()
}
func (s *waitStore) Delete(context.Context, []string) (int, error) { return 0, nil }
func (s *waitStore) ContextBounded() bool                          { return true }

func TestCallerCancellationIsNotAStoreError(t *testing.T) {
	var logs testlog.Buffer
	store := &waitStore{}
	l, err := ratelimit.New(ratelimit.Config{
		Name: "cancel", Store: store, Timeout: time.Hour,
		Breaker: ratelimit.BreakerConfig{Failures: 1},
		Logger:  slog.New(slog.NewJSONHandler(&logs, nil)),
		Rules: []ratelimit.Rule{{Name: "all", Limit: 5,
			Period: time.Minute, Action: ratelimit.ActionLimit}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		go cancel()
		r := l.Check(ctx, ratelimit.Identifier{})
		if r.Blocked() || !errors.Is(r.Err, ratelimit.ErrCanceled) || !errors.Is(r.Err, context.Canceled) {
			t.Fatalf("check %d: %+v", i, r)
		}
	}
	if store.calls != 3 {
		t.Fatalf("store called %d times, want 3: cancellations must not open the breaker", store.calls)
	}
	if s := l.BreakerState(); s != "closed" {
		t.Fatalf("breaker %s after caller cancellations", s)
	}
	if strings.Contains(logs.String(), "WARN") {
		t.Fatalf("a caller's cancellation was logged as a warning:\n%s", logs.String())
	}
}

func TestTypedNilIdentifierValueIsMissing(t *testing.T) {
	var u *url.URL
	var e *url.Error
	id := ratelimit.Identifier{"path": u, "err": e}
	for _, k := range []string{"path", "err"} {
		if v, ok := id.Get(k); ok {
			t.Fatalf("%s: typed nil is present as %q", k, v)
		}
	}
	if got := keys.Canonical(u); got == "" {
		t.Fatalf("Canonical(nil *url.URL) = %q", got)
	}
	l, err := ratelimit.New(ratelimit.Config{Name: "tn", Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "by_path", Characteristics: []string{"path"}, Match: map[string]ratelimit.Matcher{"err": ratelimit.Regex(".*")},
			Limit: 1, Period: time.Minute, Action: ratelimit.ActionLimit}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := l.Check(context.Background(), id); r.Err != nil || r.Matched {
		t.Fatalf("typed nil values: %+v", r)
	}
}

func TestMissingCharacteristicIsNotASharedBucket(t *testing.T) {
	var logs testlog.Buffer
	rule := ratelimit.Rule{Name: "per_user", Characteristics: []string{"usr"}, // a typo: requests carry "user"
		Limit: 1, Period: time.Minute, Action: ratelimit.ActionLimit}
	opted := rule
	opted.Name, opted.CountMissing = "per_user_or_all", true
	for _, tc := range []struct {
		rule         ratelimit.Rule
		wantBlock    bool // the 2nd caller is blocked: one shared bucket
		wantDegraded bool
	}{{rule, false, true}, {opted, true, false}} {
		t.Run(tc.rule.Name, func(t *testing.T) {
			l, err := ratelimit.New(ratelimit.Config{Name: "miss", Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{tc.rule},
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			first := l.Check(ctx, ratelimit.Identifier{"user": "alice"})
			second := l.Check(ctx, ratelimit.Identifier{"user": "bob"})
			if first.Blocked() || second.Blocked() != tc.wantBlock || second.Degraded != tc.wantDegraded || second.Err != nil {
				t.Fatalf("first %+v\nsecond %+v", first, second)
			}
		})
	}
	if !strings.Contains(logs.String(), `"msg":"rate_limit_missing_characteristic","limiter":"miss","rule":"per_user","property":"usr"`) {
		t.Fatalf("no WARN naming the rule and property:\n%s", logs.String())
	}
}
