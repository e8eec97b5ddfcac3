package ratelimit

import (
	"context"
	"testing"
	"time"
)

type staticSource struct {
	set   *RuleSet
	calls int
}

func (s *staticSource) RulesFor(context.Context, string, Identifier) *RuleSet {
	s.calls++
	return s.set
}

func TestPerRequestTierOverridesByName(t *testing.T) {
	ctx := context.Background()
	store := NewMemoryStore()
	base := []Rule{
		{Name: "per_user", Characteristics: []string{"user"}, Limit: 2, Period: time.Minute, Action: ActionLimit},
		{Name: "global", Limit: 100, Period: time.Minute, Action: ActionLimit},
	}
	src := &staticSource{}
	l, err := New(Config{Name: "t", Store: store, Rules: base, RuleSource: src.RulesFor})
	if err != nil {
		t.Fatal(err)
	}
	id := Identifier{"user": "u1"}
	// Without per-request rules the base limit of 2 applies.
	for i := 0; i < 2; i++ {
		if r := l.Check(ctx, id); r.Blocked() {
			t.Fatalf("check %d blocked", i)
		}
	}
	if r := l.Check(ctx, id); !r.Blocked() || r.Rule.Name != "per_user" || r.Evaluations[0].PerRequest {
		t.Fatalf("3rd check: %+v", r)
	}
	// A remote rule of the same name replaces it and inherits the counter (3 so far).
	set, err := CompileRules("", []Rule{{Name: "per_user", Characteristics: []string{"user"}, Limit: 4, Period: time.Minute, Action: ActionLimit}})
	if err != nil {
		t.Fatal(err)
	}
	src.set = set
	r := l.Check(ctx, id)
	if r.Blocked() || r.Info.Count != 4 || !r.Evaluations[0].PerRequest || len(r.Evaluations) != 2 {
		t.Fatalf("with remote tier: %+v", r)
	}
	if r := l.Check(ctx, id); !r.Blocked() {
		t.Fatalf("5th check should block at remote limit 4: %+v", r)
	}
	// WithRules stacks above the source.
	over, _ := CompileRules("", []Rule{{Name: "per_user", Action: ActionSkip}})
	if r := l.Check(ctx, id, WithRules(over)); r.Blocked() || !r.Skipped {
		t.Fatalf("WithRules skip: %+v", r)
	}
	// Clear reaches the per-request rules' counters too.
	if _, err := l.Clear(ctx, id); err != nil {
		t.Fatal(err)
	}
	if r := l.Check(ctx, id); r.Blocked() || r.Info.Count != 1 {
		t.Fatalf("after clear: %+v", r)
	}
	if _, err := CompileRules("", []Rule{{Name: "BAD"}}); err == nil {
		t.Fatal("invalid rule compiled")
	}
}

func TestCompileTierNamesEvaluations(t *testing.T) {
	base := []Rule{{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 9, Period: time.Minute, Action: ActionLimit}}
	set, err := CompileRules("remote", []Rule{{Name: "per_user", Characteristics: []string{"user"}, Limit: 9, Period: time.Minute, Action: ActionLimit}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Name: "t", Store: NewMemoryStore(), Rules: base, RuleSource: (&staticSource{set: set}).RulesFor})
	if err != nil {
		t.Fatal(err)
	}
	r := l.Check(context.Background(), Identifier{"user": "u", "ip": "i"})
	if len(r.Evaluations) != 2 || r.Evaluations[0].Tier != "remote" || !r.Evaluations[0].PerRequest || r.Evaluations[1].Tier != "" {
		t.Fatalf("evaluations %+v: want the remote tier named on its rule only", r.Evaluations)
	}
	if _, err := CompileRules("remote", []Rule{{Name: "BAD"}}); err == nil {
		t.Fatal("an invalid rule compiled")
	}
}

// A check that the blocked cache answers names the tier of the per-request
// rule it blocks on, as the check that the store answered did: the cached
// evaluation left Tier empty.
func TestCachedBlockNamesItsTier(t *testing.T) {
	ctx := context.Background()
	set, err := CompileRules("remote", []Rule{{Name: "per_user", Characteristics: []string{"user"}, Limit: 1, Period: time.Minute, BanFor: time.Hour, Action: ActionLimit}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Name: "t", Store: NewMemoryStore(), RuleSource: (&staticSource{set: set}).RulesFor})
	if err != nil {
		t.Fatal(err)
	}
	id := Identifier{"user": "u"}
	l.Check(ctx, id)
	if r := l.Check(ctx, id); !r.Banned() || l.BlockedCacheLen() != 1 {
		t.Fatalf("2nd check: %+v, %d cached: want banned and cached", r, l.BlockedCacheLen())
	}
	r := l.Check(ctx, id) // from the cache
	if len(r.Evaluations) != 1 || !r.Evaluations[0].Blocked || !r.Evaluations[0].PerRequest || r.Evaluations[0].Tier != "remote" {
		t.Fatalf("cached answer's evaluations %+v: want the remote tier's blocking rule", r.Evaluations)
	}
}

// TestExemptionsHoldAgainstPerRequestTiers: the skip rules that open the
// limiter's rules (health checks) are evaluated before a per-request tier's
// match-all rule, unless that tier replaces one by name.
func TestExemptionsHoldAgainstPerRequestTiers(t *testing.T) {
	ctx := context.Background()
	base := []Rule{
		{Name: "skip_health_checks", Action: ActionSkip, Match: map[string]Matcher{"path": OneOf("/healthz", "/readyz")}},
		{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 100, Period: time.Minute},
	}
	incident := []Rule{{Name: "incident", Characteristics: []string{"ip"}, Limit: 2, Period: time.Minute}}
	tests := []struct {
		name        string
		remote      []Rule
		wantBlocked bool // the third /healthz check
	}{
		{"match-all rule", incident, false},
		{"exemption overridden by name", append(incident, Rule{Name: "skip_health_checks", Characteristics: []string{"ip"}, Limit: 1, Period: time.Minute}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := CompileRules("remote", tt.remote)
			if err != nil {
				t.Fatal(err)
			}
			l, err := New(Config{Name: "t", Store: NewMemoryStore(), Rules: base, RuleSource: (&staticSource{set: set}).RulesFor})
			if err != nil {
				t.Fatal(err)
			}
			health := Identifier{"ip": "10.0.0.1", "path": "/healthz"}
			var r Result
			for range 3 {
				r = l.Check(ctx, health)
			}
			if r.Blocked() != tt.wantBlocked {
				t.Fatalf("third /healthz: blocked %v, want %v (%+v)", r.Blocked(), tt.wantBlocked, r)
			}
			for range 3 {
				r = l.Check(ctx, Identifier{"ip": "10.0.0.1", "path": "/api"})
			}
			if !r.Blocked() || r.Rule.Name != "incident" {
				t.Fatalf("third /api: %+v, want blocked by the incident rule", r)
			}
		})
	}
}

type tenantKey struct{}

// TestClearPassesItsContextToTheRuleSource: Clear asks the RuleSource with
// the caller's context, as a check does, so that a source answering by what
// the context carries (a tenant, a deadline) names the same rules: asked with
// context.Background, it named none, and the per-request rule's counter
// outlived the Clear.
func TestClearPassesItsContextToTheRuleSource(t *testing.T) {
	set, err := CompileRules("remote", []Rule{{Name: "per_tenant", Characteristics: []string{"user"}, Limit: 1, Period: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	source := func(ctx context.Context, _ string, _ Identifier) *RuleSet {
		if ctx.Value(tenantKey{}) == nil {
			return nil
		}
		return set
	}
	l, err := New(Config{Name: "t", Store: NewMemoryStore(), RuleSource: source})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), tenantKey{}, "acme")
	id := Identifier{"user": "u1"}
	for i, want := range []bool{false, true} {
		if r := l.Check(ctx, id); r.Blocked() != want {
			t.Fatalf("check #%d: blocked %v, want %v", i+1, r.Blocked(), want)
		}
	}
	if n, err := l.Clear(ctx, id); err != nil || n != 1 {
		t.Fatalf("Clear = %d, %v; want the per-request rule's counter, 1", n, err)
	}
	if r := l.Check(ctx, id); r.Blocked() {
		t.Fatalf("check after Clear blocked: count %v", r.Info.Count)
	}
}

// Result.RulePerRequest says which tier Result.Rule came from, a skip rule's
// too (it has no Evaluation that could say so): an observer bounds the rule
// names of per-request tiers apart from the limiter's own.
func TestResultRuleNamesItsTier(t *testing.T) {
	base := []Rule{
		{Name: "local_skip", Action: ActionSkip, Match: map[string]Matcher{"user": Equal("vip")}},
		{Name: "local", Characteristics: []string{"user"}, Limit: 1, Period: time.Minute},
	}
	remote := []Rule{
		{Name: "remote_skip", Action: ActionSkip, Match: map[string]Matcher{"user": Equal("bot")}},
		{Name: "remote", Characteristics: []string{"user"}, Limit: 1, Period: time.Minute, Match: map[string]Matcher{"kind": Equal("api")}},
	}
	set, err := CompileRules("remote", remote)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Name: "t", Store: NewMemoryStore(), Rules: base, RuleSource: (&staticSource{set: set}).RulesFor})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id         Identifier
		rule       string
		perRequest bool
	}{
		{Identifier{"user": "vip"}, "local_skip", false},
		{Identifier{"user": "bot"}, "remote_skip", true},
		{Identifier{"user": "u1"}, "local", false},
		{Identifier{"user": "u2", "kind": "api"}, "remote", true}, // both at their limit: ties to rule order, remote first
	}
	for _, tt := range tests {
		r := l.Check(context.Background(), tt.id)
		if r.RuleName() != tt.rule || r.RulePerRequest != tt.perRequest {
			t.Errorf("check %v: rule %q, RulePerRequest %t; want %q, %t", tt.id, r.RuleName(), r.RulePerRequest, tt.rule, tt.perRequest)
		}
	}
}
