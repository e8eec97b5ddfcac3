package rulestore

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

func modeRequest(limiter string, m configv1.Mode, rules ...*configv1.Rule) *configv1.PublishRulesRequest {
	return &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{limiter: {Mode: m, Rules: rules}}}
}

// TestPublishedModeFlipsEveryProcess: two processes (two rule stores and two
// limiters on the same Redis) follow a published mode: publishing shadow
// makes both count without blocking, publishing enforce makes both block.
// The mode lives beside the published rules and survives their deletion, and
// the stored bytes are what the Go encoder writes.
func TestPublishedModeFlipsEveryProcess(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		prefix, counters := testPrefix(t), redistest.Prefix(t)
		type proc struct {
			s   *Store
			lim *ratelimit.Limiter
		}
		procs := make([]proc, 2)
		for i := range procs {
			s := newStore(t, c, Options{Prefix: prefix, Available: available(t)})
			lim, err := ratelimit.New(ratelimit.Config{Name: "search", Store: redisstore.New(c), KeyPrefix: counters, Timeout: checkTimeout})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Bind(lim, tiers.Set{Defaults: []ratelimit.Rule{rule("by_user", 2)}}); err != nil {
				t.Fatal(err)
			}
			procs[i] = proc{s, lim}
		}
		refreshAll := func(want ratelimit.Enforcement) {
			t.Helper()
			for i, p := range procs {
				if err := p.s.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
				if got := p.lim.Enforcement(); got != want {
					t.Fatalf("process %d: mode %v, want %v", i, got, want)
				}
			}
		}
		refreshAll(ratelimit.Enforce)
		pub := procs[0].s
		if _, err := pub.Publish(ctx, modeRequest("search", configv1.Mode_MODE_UNSPECIFIED, protoRule(t, "extra", 100))); err != nil {
			t.Fatal(err)
		}
		if _, err := pub.Publish(ctx, modeRequest("search", configv1.Mode_MODE_SHADOW)); err != nil {
			t.Fatal(err)
		}
		refreshAll(ratelimit.Shadow)
		if got := names(procs[1].lim.Rules()); len(got) != 2 {
			t.Fatalf("publishing a mode changed the rules: %v", got)
		}
		bob := ratelimit.Identifier{"user": "bob"}
		for i := 1; i <= 4; i++ {
			r := procs[i%2].lim.Check(ctx, bob)
			if r.Err != nil || r.Blocked() || !r.Shadow || r.WouldBlock() != (i > 2) {
				t.Fatalf("shadow check %d: blocked=%v shadow=%v wouldBlock=%v err=%v", i, r.Blocked(), r.Shadow, r.WouldBlock(), r.Err)
			}
		}
		stored, _ := raw(t, c, pub.Key("search"))
		if !strings.Contains(stored, `"published_rules":{"mode":"shadow","rules":[`) {
			t.Fatalf("stored document %s", stored)
		}
		doc, err := config.UnmarshalLimiterRules([]byte(stored))
		if err != nil {
			t.Fatal(err)
		}
		if again, err := config.MarshalLimiterRules(doc); err != nil || string(again) != stored {
			t.Fatalf("stored bytes differ from the Go encoder's:\n%s\n%s (%v)", stored, again, err)
		}
		// Deleting the published rules keeps the published mode.
		if _, err := pub.Delete(ctx, "search", "extra"); err != nil {
			t.Fatal(err)
		}
		refreshAll(ratelimit.Shadow)
		if _, err := pub.Publish(ctx, modeRequest("search", configv1.Mode_MODE_ENFORCE)); err != nil {
			t.Fatal(err)
		}
		refreshAll(ratelimit.Enforce)
		if r := procs[1].lim.Check(ctx, bob); !r.Blocked() || r.Shadow {
			t.Fatalf("after enforce: %+v, want blocked on the counts made in shadow", r)
		}
	})
}

// TestFileModeOverridesPublished: the mode of rate_limits.yaml (the file
// tier) wins over a published one, as a file rule wins over a published rule;
// with no tier setting a mode the limiter keeps its own Config.Enforcement.
func TestFileModeOverridesPublished(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{Available: available(t)})
		lim, err := ratelimit.New(ratelimit.Config{Name: "search", Store: redisstore.New(c), KeyPrefix: redistest.Prefix(t), Enforcement: ratelimit.Shadow, Timeout: checkTimeout})
		if err != nil {
			t.Fatal(err)
		}
		local := tiers.Set{Defaults: []ratelimit.Rule{rule("by_user", 2)}, Mode: new(ratelimit.Enforce)}
		if err := s.Bind(lim, local); err != nil {
			t.Fatal(err)
		}
		if lim.Enforcement() != ratelimit.Enforce {
			t.Fatalf("bound with a file mode enforce: %v", lim.Enforcement())
		}
		if _, err := s.SeedBound(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Publish(ctx, modeRequest("search", configv1.Mode_MODE_SHADOW)); err != nil {
			t.Fatal(err)
		}
		if err := s.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if lim.Enforcement() != ratelimit.Enforce {
			t.Fatalf("published shadow overrode the file's enforce: %v", lim.Enforcement())
		}
		stored, _ := raw(t, c, s.Key("search"))
		if !strings.Contains(stored, `"file_rules":{"mode":"enforce","rules":[]}`) {
			t.Fatalf("seeded document %s", stored)
		}
		// The file drops its mode: the published one applies.
		if _, err := s.Seed(ctx, map[string]tiers.Set{"search": {Defaults: local.Defaults}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if lim.Enforcement() != ratelimit.Shadow {
			t.Fatalf("without a file mode: %v, want the published shadow", lim.Enforcement())
		}
	})
}

// TestConfigTiersCarryFileMode: rate_limits.yaml's mode reaches the tiers.
func TestConfigTiersCarryFileMode(t *testing.T) {
	avail := available(t)
	rl, err := config.ParseRateLimits("rate_limits.yaml", []byte("rate_limits:\n  search: {mode: shadow, rules: []}\n"), avail)
	if err != nil {
		t.Fatal(err)
	}
	sets, err := ConfigTiers(avail, rl)
	if err != nil {
		t.Fatal(err)
	}
	if m := sets["search"].Mode; m == nil || *m != ratelimit.Shadow || sets["projects"].Mode != nil {
		t.Fatalf("file modes: %v, %v", sets["search"].Mode, sets["projects"].Mode)
	}
}

// TestDeleteModeLiftsPublished: the drill's stale shadow. A mode published
// into the published tier was never removable (Delete takes rule names and
// the mode outlives them), so when rate_limits.yaml dropped its own mode the
// published shadow took effect. DeleteMode removes it in one write: the
// limiter goes back to its own mode, the published rules stay, and a
// DeleteMode with nothing to remove (or with a rule not published) writes
// nothing and says why. A document of the published mode alone goes with
// its index entry.
func TestDeleteModeLiftsPublished(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{Available: available(t)})
		lim, err := ratelimit.New(ratelimit.Config{Name: "search", Store: redisstore.New(c), KeyPrefix: redistest.Prefix(t), Timeout: checkTimeout})
		if err != nil {
			t.Fatal(err)
		}
		local := tiers.Set{Defaults: []ratelimit.Rule{rule("by_user", 2)}}
		if err := s.Bind(lim, local); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SeedBound(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Publish(ctx, modeRequest("search", configv1.Mode_MODE_SHADOW, protoRule(t, "extra", 100))); err != nil {
			t.Fatal(err)
		}
		if err := s.Refresh(ctx); err != nil || lim.Enforcement() != ratelimit.Shadow {
			t.Fatalf("published shadow: %v, %v", lim.Enforcement(), err)
		}
		before, _ := raw(t, c, s.Key("search"))
		rev, _ := s.Revision(ctx)
		// All or nothing: a rule not published keeps the mode too.
		if _, err := s.DeleteMode(ctx, "search", "missing"); !errors.Is(err, ErrRuleNotFound) {
			t.Fatalf("DeleteMode with a rule not published: %v", err)
		}
		res, err := s.DeleteMode(ctx, "search")
		if err != nil || !slices.Equal(res.Changed, []string{"search"}) || res.Revision != rev+1 {
			t.Fatalf("DeleteMode: %+v, %v (revision was %d)", res, err, rev)
		}
		after, _ := raw(t, c, s.Key("search"))
		if want := strings.Replace(before, `"published_rules":{"mode":"shadow","rules":`, `"published_rules":{"rules":`, 1); after != want || after == before {
			t.Fatalf("after DeleteMode:\n%s\nwant\n%s", after, want)
		}
		if err := s.Refresh(ctx); err != nil || lim.Enforcement() != ratelimit.Enforce || len(lim.Rules()) != 2 {
			t.Fatalf("after DeleteMode: %v, rules %v, %v", lim.Enforcement(), names(lim.Rules()), err)
		}
		// Nothing left to remove: refused, nothing written.
		_, err = s.DeleteMode(ctx, "search")
		if !errors.Is(err, ErrModeNotPublished) || !strings.Contains(err.Error(), "limiter search: no published mode; nothing was written") {
			t.Fatalf("DeleteMode again: %v", err)
		}
		if again, _ := s.Revision(ctx); again != rev+1 {
			t.Fatalf("a refused DeleteMode moved the revision to %d", again)
		}
		// A mode of rate_limits.yaml is not the published one: the error
		// says where it is.
		if _, err := s.Seed(ctx, map[string]tiers.Set{"search": {Defaults: local.Defaults, Mode: new(ratelimit.Shadow)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DeleteMode(ctx, "search"); !errors.Is(err, ErrModeNotPublished) || !strings.Contains(err.Error(), "mode shadow is file_rules' (edit rate_limits.yaml)") {
			t.Fatalf("DeleteMode of a file mode: %v", err)
		}
		// A document of a published mode alone is removed whole, with the
		// mode and the rules named.
		if _, err := s.Publish(ctx, modeRequest("projects", configv1.Mode_MODE_SHADOW, protoRule(t, "extra", 100))); err != nil {
			t.Fatal(err)
		}
		if res, err := s.DeleteMode(ctx, "projects", "extra"); err != nil || !slices.Equal(res.Changed, []string{"projects"}) {
			t.Fatalf("DeleteMode projects: %+v, %v", res, err)
		}
		if _, ok := raw(t, c, s.Key("projects")); ok {
			t.Fatal("the emptied document stayed")
		}
		if n, err := c.SIsMember(ctx, s.indexKey(), "projects").Result(); err != nil || n {
			t.Fatalf("index still names projects: %v, %v", n, err)
		}
		if _, err := s.DeleteMode(ctx, "projects"); !errors.Is(err, ErrModeNotPublished) || !strings.Contains(err.Error(), "the limiter has no document") {
			t.Fatalf("DeleteMode without a document: %v", err)
		}
	})
}
