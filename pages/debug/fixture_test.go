package debug_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/observability/observe"
	"github.com/ratekit/ratekit/pages/debug"
	"github.com/redis/go-redis/v9"
)

// tierState is a limiter's tiers and replica state as a rule store holds them.
type tierState struct {
	tiers.Set
	refreshedAt time.Time
	refreshErr  error
}

// staticTiers is a TierSource holding fixed tiers, standing in for the rule store.
type staticTiers map[string]tierState

var _ debug.TierSource = staticTiers(nil)

func (s staticTiers) Tiers(limiter string) (tiers.Set, bool) {
	t, ok := s[limiter]
	return t.Set, ok
}

func (s staticTiers) RefreshStatus(limiter string) (time.Time, error) {
	t := s[limiter]
	return t.refreshedAt, t.refreshErr
}

var (
	fixtureNow = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	minute     = time.Minute
)

func fixtureTiers() tierState {
	return tierState{Set: tiers.Set{
		File: []ratelimit.Rule{{
			Name: "per_user", Description: "<script>alert(1)</script> lowered for incident #42",
			Characteristics: []string{"user"}, Limit: 3, Period: minute,
			Match: map[string]ratelimit.Matcher{"kind": ratelimit.Equal("api")},
		}},
		Published: []ratelimit.Rule{
			{Name: "shadow_ip", Action: ratelimit.ActionLog, Characteristics: []string{"ip"}, Limit: 2, Period: minute,
				Match: map[string]ratelimit.Matcher{"kind": ratelimit.OneOf("api", "login")}},
			{Name: "per_user", Characteristics: []string{"user"}, Limit: 25, Period: minute},
		},
		Defaults: []ratelimit.Rule{
			{Name: "trusted", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"ip": ratelimit.Equal("127.0.0.1")}},
			{Name: "per_user", Characteristics: []string{"user"}, Limit: 200, Period: minute},
			{Name: "login_ban", Characteristics: []string{"ip"}, Limit: 1, Period: minute, BanFor: 15 * time.Minute,
				Match: map[string]ratelimit.Matcher{"kind": ratelimit.Equal("login")}},
			{Name: "paths", Action: ratelimit.ActionLog, Characteristics: []string{"user"}, CountDistinct: "path",
				Limit: 100, Period: time.Hour,
				Match: map[string]ratelimit.Matcher{"path": ratelimit.Regex(`^/api/`)}},
			{Name: "by_plan", Characteristics: []string{"user"},
				LimitFunc: func(context.Context) (int64, error) { return 1000, nil },
				Period:    time.Hour},
		},
	},
		refreshedAt: fixtureNow.Add(-42 * time.Second),
		refreshErr:  errors.New("dial tcp 10.0.0.5:6379: connect: connection refused"),
	}
}

type fixture struct {
	handler *debug.Handler
	prefix  string // key prefix of limiter api
}

// redisTimeout is the timeout of the limiters on the real Redis, whose checks
// must succeed: the default 100ms is hit by a loaded machine descheduling a
// check that long.
const redisTimeout = 10 * time.Second

// newFixture builds three limiters: "api" on the real Redis with tiered rules
// and some blocks, "jobs" on an unreachable Redis with its breaker open, and
// "empty" without rules.
func newFixture(t *testing.T) fixture {
	t.Helper()
	ctx := context.Background()
	blocks := observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return fixtureNow }})
	ft := fixtureTiers()
	prefix := redistest.Prefix(t)
	api, err := ratelimit.New(ratelimit.Config{Name: "api", Store: redisstore.New(redistest.Client(t)), KeyPrefix: prefix,
		Rules: ft.Merged(), Observer: blocks.Observe, Logger: slog.New(slog.DiscardHandler), Timeout: redisTimeout})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 { // per_user (limit 3) blocks twice
		api.Check(ctx, ratelimit.Identifier{"user": "u1", "kind": "api", "ip": "10.0.0.1", "path": "/api/v4/user"})
	}
	for range 2 { // login_ban blocks (and bans) the second
		api.Check(ctx, ratelimit.Identifier{"ip": "10.0.0.2", "kind": "login", "user": "u2"})
	}
	blocks.Flush(ctx) // the per_user and login_ban blocks become the previous interval
	api.Check(ctx, ratelimit.Identifier{"user": "u1", "kind": "api", "ip": "10.0.0.1", "path": "/api/v4/user"})

	jobs, err := ratelimit.New(ratelimit.Config{Name: "jobs", Store: unreachable(t), Observer: blocks.Observe, Logger: slog.New(slog.DiscardHandler),
		Breaker: ratelimit.BreakerConfig{Failures: 1, Cooldown: time.Hour},
		Rules:   []ratelimit.Rule{{Name: "per_queue", Characteristics: []string{"queue"}, Limit: 10, Period: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := jobs.Check(ctx, ratelimit.Identifier{"queue": "default"}); r.Err == nil {
		t.Fatalf("check on an unreachable Redis: %+v", r)
	}
	empty, err := ratelimit.New(ratelimit.Config{Name: "empty", Store: ratelimit.NewMemoryStore()})
	if err != nil {
		t.Fatal(err)
	}
	h := debug.New(debug.Options{Tiers: staticTiers{"api": ft}, Blocks: blocks, Now: func() time.Time { return fixtureNow }}, jobs, api)
	h.Register(empty)
	return fixture{handler: h, prefix: prefix}
}

func (f fixture) server(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(f.handler)
	t.Cleanup(srv.Close)
	return srv
}

// unreachable is a real Redis store whose server is gone: every call fails at once.
func unreachable(t *testing.T) ratelimit.Store {
	c := redis.NewClient(&redis.Options{Addr: redistest.UnusedAddr(t), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return redisstore.New(c)
}
