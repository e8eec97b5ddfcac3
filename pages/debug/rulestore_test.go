package debug_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/pages/debug"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// The page shows the tiers of a limiter bound to the real rule store: the
// published rule that replaces a default, and the replica's refresh time.
func TestRuleStoreTiers(t *testing.T) {
	ctx := context.Background()
	client := redistest.Client(t)
	prefix := redistest.Prefix(t)
	now := time.Now()
	store, err := rulestore.New(client, rulestore.Options{Prefix: prefix + "{rules}:", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ft := fixtureTiers()
	local := tiers.Set{File: ft.File, Defaults: ft.Defaults[:3]} // static rules only: the document holds numbers
	l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: redisstore.New(client), KeyPrefix: prefix, Timeout: redisTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Bind(l, local); err != nil {
		t.Fatal(err)
	}
	pub, err := config.RulesToProto([]ratelimit.Rule{{Name: "login_ban", Characteristics: []string{"ip"},
		Limit: 3, Period: time.Minute, BanFor: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": pub}}); err != nil {
		t.Fatal(err)
	}
	if err := store.Refresh(ctx); err != nil {
		t.Fatal(err)
	}

	h := debug.New(debug.Options{Tiers: store}, l)
	snap := h.Snapshot()
	v := snap.Limiters[0]
	var got []string
	for _, r := range v.Rules {
		got = append(got, r.Tier+" "+r.Name)
	}
	if want := []string{"default trusted", "file per_user", "published login_ban"}; !slices.Equal(got, want) {
		t.Fatalf("effective rules %q, want %q", got, want)
	}
	got = nil
	for _, r := range v.Overridden {
		got = append(got, r.Tier+" "+r.Name+" by "+r.OverriddenBy)
	}
	if want := []string{"default per_user by file", "default login_ban by published"}; !slices.Equal(got, want) {
		t.Fatalf("overridden %q, want %q", got, want)
	}
	rs := v.RuleStore
	if rs == nil || rs.RefreshedAt == nil || rs.RefreshedAt.Before(now.Add(-time.Second)) || rs.RefreshError != "" {
		b, _ := json.Marshal(rs)
		t.Fatalf("rule store %s", b)
	}
}
