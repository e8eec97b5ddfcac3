package observe_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observability/observe"
)

// storeKind is one backend the observer tests run against: a working store and
// one that fails every call (to exercise fail-open).
type storeKind struct {
	name   string
	store  func(t *testing.T) (ratelimit.Store, string) // store and key prefix
	broken func(t *testing.T) ratelimit.Store
	// errType is the error.type of a check against the broken store.
	errType string
}

var discard = slog.New(slog.DiscardHandler)

var memoryKind = storeKind{
	name:    "memory",
	store:   func(*testing.T) (ratelimit.Store, string) { return ratelimit.NewMemoryStore(), "" },
	broken:  func(*testing.T) ratelimit.Store { return failingStore{} },
	errType: "_OTHER",
}

// failingStore stands in for an unreachable store in the memory variant; the
// Redis variant uses a real connection to a closed port.
type failingStore struct{}

var errDown = errors.New("store down")

func (failingStore) Eval(context.Context, ratelimit.Mode, []ratelimit.Op) ([]ratelimit.OpResult, error) {
	return nil, errDown
}
func (failingStore) Delete(context.Context, []string) (int, error) { return 0, errDown }

// testRules exercises every evaluation result: skip, shadow (log) rules,
// a blocking limit rule, a ban and a count_distinct rule.
func testRules() []ratelimit.Rule {
	min := time.Minute
	return []ratelimit.Rule{
		{Name: "trusted", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"ip": ratelimit.Equal("127.0.0.1")}},
		{Name: "shadow_ip", Action: ratelimit.ActionLog, Characteristics: []string{"ip"}, Limit: 2, Period: min,
			Match: map[string]ratelimit.Matcher{"kind": ratelimit.OneOf("api", "login")}},
		{Name: "per_user", Characteristics: []string{"user"}, Limit: 3, Period: min,
			Match: map[string]ratelimit.Matcher{"kind": ratelimit.Equal("api")}},
		{Name: "login_ban", Characteristics: []string{"ip"}, Limit: 1, Period: min, BanFor: time.Minute,
			Match: map[string]ratelimit.Matcher{"kind": ratelimit.Equal("login")}},
		{Name: "paths", Action: ratelimit.ActionLog, Characteristics: []string{"user"}, CountDistinct: "path",
			Limit: 5, Period: min, Match: map[string]ratelimit.Matcher{"kind": ratelimit.Equal("api")}},
	}
}

func newLimiter(t *testing.T, name string, store ratelimit.Store, prefix string, obs observe.Observer) *ratelimit.Limiter {
	t.Helper()
	var observer func(context.Context, ratelimit.Event)
	if obs != nil {
		observer = obs.Observe
	}
	l, err := ratelimit.New(ratelimit.Config{
		Name: name, Store: store, KeyPrefix: prefix, Rules: testRules(), Observer: observer,
		Logger: discard, Timeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// scenario runs the checks whose metrics the tests assert. It returns the
// verdicts so that tests can confirm what the store decided.
func scenario(ctx context.Context, l *ratelimit.Limiter) []ratelimit.Verdict {
	var got []ratelimit.Verdict
	check := func(id ratelimit.Identifier) { got = append(got, l.Check(ctx, id).Action) }
	check(ratelimit.Identifier{"ip": "127.0.0.1", "kind": "api", "user": "u0"}) // skip
	for range 4 {                                                               // shadow_ip exceeds at 3, per_user blocks the 4th
		check(ratelimit.Identifier{"ip": "10.0.0.1", "kind": "api", "user": "u1", "path": "/a"})
	}
	check(ratelimit.Identifier{"ip": "10.0.0.2", "kind": "api", "user": "u2"}) // no path: paths degraded
	for range 3 {                                                              // login_ban: allow, ban starts, banned
		check(ratelimit.Identifier{"ip": "10.0.0.3", "kind": "login"})
	}
	check(ratelimit.Identifier{"kind": "other"}) // no rule matches
	l.Peek(ctx, ratelimit.Identifier{"ip": "10.0.0.1", "kind": "api", "user": "u1", "path": "/b"})
	l.Peek(ctx, ratelimit.Identifier{"ip": "10.0.0.9", "kind": "api", "user": "u9"}) // no path: degraded
	return got
}

var scenarioVerdicts = []ratelimit.Verdict{"allow", "allow", "allow", "allow", "block", "allow", "allow", "block", "block", "allow"}

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// lines renders each record as "LEVEL msg k=v k=v".
func (h *logRecorder) lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		s := r.Level.String() + " " + r.Message
		r.Attrs(func(a slog.Attr) bool {
			s += " " + a.Key + "=" + a.Value.String()
			return true
		})
		out = append(out, s)
	}
	return out
}
