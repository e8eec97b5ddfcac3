package rulestore

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// template is the registration of the design's publisher example, without
// its limit.
func template() ratelimit.Rule {
	return ratelimit.Rule{
		Name:            "limit_user_autocompletes_by_user",
		Characteristics: []string{"user"},
		Period:          time.Minute,
		Action:          ratelimit.ActionLimit,
	}
}

// setCalls returns how many SET commands the server has run (scripts
// included), an observation of writes independent of the store.
func setCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_set:calls="); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

func TestPublisherIsIdempotent(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		standalone, _ := c.(*redis.Client)
		if standalone != nil {
			// INFO commandstats counts every client's SETs: use a server of
			// this test's own, so tests of other packages running at the same
			// time cannot change the count.
			srv := redistest.StartServer(t)
			standalone = redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { standalone.Close() })
			c = standalone
		}
		s := newStore(t, c, Options{Available: available(t)})
		p := NewPublisher(s, PublisherOptions{})
		var setting atomic.Int64 // the application's setting
		setting.Store(25)
		if err := p.Register("autocomplete_users", template(), func(context.Context) (int64, error) { return setting.Load(), nil }); err != nil {
			t.Fatal(err)
		}
		// A template carrying its own LimitFunc needs no separate resolver.
		search := rule("search_by_user", 0)
		search.LimitFunc = func(context.Context) (int64, error) { return 40, nil }
		if err := p.Register("search", search, nil); err != nil {
			t.Fatal(err)
		}

		var sets int64
		if standalone != nil {
			sets = setCalls(t, standalone)
		}
		res, err := p.PublishAll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Changed, []string{"autocomplete_users", "search"}) || res.Revision != 1 {
			t.Fatalf("first PublishAll: %+v", res)
		}
		want := `{"published_rules":{"rules":[{"name":"limit_user_autocompletes_by_user","limit":25,"period_s":60,"action":"limit","characteristics":["user"],"match":{}}]}}`
		if got, _ := raw(t, c, s.Key("autocomplete_users")); got != want {
			t.Fatalf("stored\n got %s\nwant %s", got, want)
		}
		if standalone != nil {
			after := setCalls(t, standalone)
			if after != sets+2 {
				t.Fatalf("first PublishAll ran %d SETs, want 2", after-sets)
			}
			sets = after
		}

		// The same values again: nothing written.
		for range 3 {
			res, err = p.PublishAll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Changed) != 0 || res.Revision != 1 {
				t.Fatalf("repeated PublishAll: %+v", res)
			}
		}
		if got, _ := raw(t, c, s.Key("autocomplete_users")); got != want {
			t.Fatalf("document changed by a repeat: %s", got)
		}
		if standalone != nil {
			if after := setCalls(t, standalone); after != sets {
				t.Fatalf("repeated PublishAll ran %d SETs", after-sets)
			}
		}

		// A changed setting: only its limiter is rewritten.
		setting.Store(30)
		if res, err = p.PublishAll(ctx); err != nil || !slices.Equal(res.Changed, []string{"autocomplete_users"}) || res.Revision != 2 {
			t.Fatalf("after a change: %+v, %v", res, err)
		}
		if got, _ := raw(t, c, s.Key("autocomplete_users")); got != strings.Replace(want, `"limit":25`, `"limit":30`, 1) {
			t.Fatalf("stored %s", got)
		}
	})
}

func TestPublisherResolverFailure(t *testing.T) {
	c := redistest.Client(t)
	s := newStore(t, c, Options{Available: available(t)})
	p := NewPublisher(s, PublisherOptions{})
	broken := errors.New("settings table unavailable")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.Register("autocomplete_users", template(), func(context.Context) (int64, error) { return 0, broken }))
	zero := template()
	zero.Name = "resolves_to_zero"
	must(p.Register("search", zero, func(context.Context) (int64, error) { return 0, nil }))
	must(p.Register("projects", rule("fine", 0), func(context.Context) (int64, error) { return 8, nil }))
	res, err := p.PublishAll(ctx)
	if !errors.Is(err, broken) || !strings.Contains(err.Error(), "autocomplete_users/limit_user_autocompletes_by_user") ||
		!strings.Contains(err.Error(), "search/resolves_to_zero") {
		t.Fatalf("err = %v", err)
	}
	if !slices.Equal(res.Changed, []string{"projects"}) {
		t.Fatalf("published %v, want the rule that resolved", res.Changed)
	}
	if exists(t, c, s.Key("autocomplete_users")) || exists(t, c, s.Key("search")) || !exists(t, c, s.Key("projects")) {
		t.Fatal("wrong documents written")
	}
}

// A registered rule that the store's available_limiters.yaml refuses (a
// property the limiter does not declare, an undeclared limiter) is left out
// like a failed resolver: it never keeps the other rules from publishing.
func TestPublisherRuleRefusedByAvailable(t *testing.T) {
	c := redistest.Client(t)
	s := newStore(t, c, Options{Available: available(t)})
	p := NewPublisher(s, PublisherOptions{})
	eight := func(context.Context) (int64, error) { return 8, nil }
	badProp := template()
	badProp.Name, badProp.Characteristics = "by_plan", []string{"plan"}
	for _, reg := range []struct {
		limiter string
		rule    ratelimit.Rule
	}{
		{"search", badProp},
		{"undeclared", template()},
		{"projects", rule("fine", 0)},
	} {
		if err := p.Register(reg.limiter, reg.rule, eight); err != nil {
			t.Fatal(err)
		}
	}
	res, err := p.PublishAll(ctx)
	// Each refused rule is named once, before its reason.
	for _, name := range []string{"search/by_plan: ", "undeclared/limit_user_autocompletes_by_user: "} {
		if err == nil || strings.Count(err.Error(), name) != 1 {
			t.Fatalf("err = %v, want it to name %q once", err, name)
		}
	}
	if !slices.Equal(res.Changed, []string{"projects"}) {
		t.Fatalf("published %v, want the valid rule", res.Changed)
	}
	if exists(t, c, s.Key("search")) || exists(t, c, s.Key("undeclared")) || !exists(t, c, s.Key("projects")) {
		t.Fatal("wrong documents written")
	}
}

func TestRegisterErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redistest.UnusedAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, c, Options{})
	p := NewPublisher(s, PublisherOptions{})
	limit := func(context.Context) (int64, error) { return 1, nil }
	if err := p.Register("search", template(), limit); err != nil {
		t.Fatal(err)
	}
	withLimit := template()
	withLimit.Limit = 3
	noPeriod := template()
	noPeriod.Period = 0
	for name, call := range map[string]func() error{
		"bad limiter":   func() error { return p.Register("Search", template(), limit) },
		"duplicate":     func() error { return p.Register("search", template(), limit) },
		"limit twice":   func() error { return p.Register("projects", withLimit, limit) },
		"no limit":      func() error { return p.Register("projects", template(), nil) },
		"invalid rule":  func() error { return p.Register("projects", noPeriod, limit) },
		"bad rule name": func() error { r := template(); r.Name = "Bad"; return p.Register("projects", r, limit) },
	} {
		if err := call(); err == nil {
			t.Errorf("%s: registered", name)
		}
	}
}

// The reconciler repopulates a flushed store, and stops with its context.
func TestReconcilerRepopulatesFlushedStore(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	s := newStore(t, c, Options{})
	p := NewPublisher(s, PublisherOptions{Interval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err := p.Register("autocomplete_users", template(), func(context.Context) (int64, error) { return 25, nil }); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(runCtx)
	}()
	present := func() bool { return exists(t, c, s.Key("autocomplete_users")) }
	eventually(t, 10*time.Second, "first reconcile", present)
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "document back after FLUSHALL", present)
	entries, err := s.List(ctx)
	if err != nil || len(entries) != 1 || entries[0].Document == nil {
		t.Fatalf("index after repopulation: %+v, %v", entries, err)
	}
	stopped(t, cancel, done, "the reconciler")
}
