package tiers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
)

func rule(name string, limit int64) ratelimit.Rule {
	return ratelimit.Rule{Name: name, Characteristics: []string{"user"}, Limit: limit, Period: time.Minute}
}

func limits(rules []ratelimit.Rule) string {
	var names []string
	for _, x := range rules {
		n, _ := x.Limit, x.LimitFunc == nil
		names = append(names, fmt.Sprintf("%s=%d", x.Name, n))
	}
	return fmt.Sprint(names)
}

func TestMerge(t *testing.T) {
	file := []ratelimit.Rule{rule("plan_free", 100), rule("shared", 1)}
	published := []ratelimit.Rule{rule("shared", 2), rule("published_only", 3)}
	defaults := []ratelimit.Rule{rule("shared", 3), rule("default_only", 4), rule("published_only", 5)}
	got := tiers.Merge(file, published, defaults)
	want := "[plan_free=100 shared=1 published_only=3 default_only=4]"
	if limits(got) != want {
		t.Fatalf("Merge = %v, want %s", limits(got), want)
	}
	set := tiers.Set{File: file, Published: published, Defaults: defaults}
	if limits(set.Merged()) != want {
		t.Fatalf("Merged = %v, want %s", limits(set.Merged()), want)
	}
}

// TestRulesListEveryTier: Rules lists all four tiers highest first, and its
// rules that nothing overrides are exactly Merged.
func TestRulesListEveryTier(t *testing.T) {
	set := tiers.Set{
		Remote:    []ratelimit.Rule{rule("shared", 0)},
		File:      []ratelimit.Rule{rule("shared", 1), rule("file_only", 2)},
		Published: []ratelimit.Rule{rule("file_only", 3), rule("published_only", 4)},
		Defaults:  []ratelimit.Rule{rule("shared", 5), rule("default_only", 6)},
	}
	var got []string
	var effective []ratelimit.Rule
	for _, r := range set.Rules() {
		got = append(got, r.Tier+"/"+r.Rule.Name+"<"+r.OverriddenBy)
		if r.OverriddenBy == "" {
			effective = append(effective, r.Rule)
		}
	}
	want := "[remote/shared< file/shared<remote file/file_only< published/file_only<file published/published_only< default/shared<remote default/default_only<]"
	if fmt.Sprint(got) != want {
		t.Fatalf("Rules = %v\nwant    %s", got, want)
	}
	if limits(effective) != limits(set.Merged()) {
		t.Fatalf("effective %s, Merged %s", limits(effective), limits(set.Merged()))
	}
	if fmt.Sprint(tiers.Names()) != "[remote file published default]" {
		t.Fatalf("Names = %v", tiers.Names())
	}
}

// TestCloneSharesNothing: a clone's tiers and mode are its own.
func TestCloneSharesNothing(t *testing.T) {
	shadow := ratelimit.Shadow
	set := tiers.Set{File: []ratelimit.Rule{rule("a", 1)}, Defaults: []ratelimit.Rule{rule("b", 2)}, Mode: &shadow}
	c := set.Clone()
	c.File[0].Name = "changed"
	*c.Mode = ratelimit.Enforce
	if set.File[0].Name != "a" || *set.Mode != ratelimit.Shadow {
		t.Fatalf("the clone shares memory with its original: %+v", set)
	}
	if c := (tiers.Set{}).Clone(); c.Mode != nil || c.File != nil {
		t.Fatalf("clone of the zero Set = %+v", c)
	}
}

// TestCloneSharesNoRuleMemory: a rule's Match map and Characteristics are the
// clone's own too, so that a holder (the rule store's replica) can hand its
// tiers out while a caller edits what it was given.
func TestCloneSharesNoRuleMemory(t *testing.T) {
	r := rule("a", 1)
	r.Match = map[string]ratelimit.Matcher{"method": ratelimit.Equal("GET")}
	r.Characteristics = []string{"user"}
	set := tiers.Set{Remote: []ratelimit.Rule{r}, File: []ratelimit.Rule{r}, Published: []ratelimit.Rule{r}, Defaults: []ratelimit.Rule{r}}
	c := set.Clone()
	for i, tier := range [][]ratelimit.Rule{c.Remote, c.File, c.Published, c.Defaults} {
		tier[0].Match["path"] = ratelimit.Equal("/x")
		delete(tier[0].Match, "method")
		tier[0].Characteristics[0] = "ip"
		orig := [][]ratelimit.Rule{set.Remote, set.File, set.Published, set.Defaults}[i][0]
		if _, ok := orig.Match["path"]; ok || len(orig.Match) != 1 || orig.Characteristics[0] != "user" {
			t.Fatalf("tier %s: editing the clone's rule changed the original: match %v, characteristics %v",
				tiers.Names()[i], orig.Match, orig.Characteristics)
		}
	}
}

func ExampleSet_Rules() {
	per := time.Minute
	set := tiers.Set{
		File:     []ratelimit.Rule{{Name: "api_by_user", Limit: 50, Period: per}},
		Defaults: []ratelimit.Rule{{Name: "api_by_user", Limit: 200, Period: per}, {Name: "api_by_ip", Limit: 500, Period: per}},
	}
	for _, r := range set.Rules() {
		n, _ := r.Rule.Limit, r.Rule.LimitFunc == nil
		fmt.Printf("%-8s %-12s limit=%d overridden_by=%q\n", r.Tier, r.Rule.Name, n, r.OverriddenBy)
	}
	// Output:
	// file     api_by_user  limit=50 overridden_by=""
	// default  api_by_user  limit=200 overridden_by="file"
	// default  api_by_ip    limit=500 overridden_by=""
}

func TestCheckBounds(t *testing.T) {
	n := func(k int) []ratelimit.Rule {
		out := make([]ratelimit.Rule, k)
		for i := range out {
			out[i] = rule(fmt.Sprintf("r%d", i), 1)
		}
		return out
	}
	full := n(ratelimit.MaxRulesPerTier)
	ok := tiers.Set{Remote: full, File: full, Published: full, Defaults: full}
	if err := ok.CheckBounds(); err != nil {
		t.Fatalf("full tiers: %v", err)
	}
	if got := len(tiers.Merge(n(ratelimit.MaxRulesPerTier), n(ratelimit.MaxRulesPerTier))); got > ratelimit.MaxRules {
		t.Fatalf("merged %d", got)
	}
	over := tiers.Set{Published: n(ratelimit.MaxRulesPerTier + 1), Defaults: n(ratelimit.MaxRulesPerTier + 2)}
	err := over.CheckBounds()
	if err == nil || err.Error() != "tier published holds 257 rules, at most 256\ntier default holds 258 rules, at most 256" {
		t.Fatalf("over: %v", err)
	}
}

// TestExemptionsHoldAgainstEveryTier: the skip rules that open the default
// tier come before every higher tier's rules, match-all ones included, unless
// a higher tier names them; Rules lists them first too.
func TestExemptionsHoldAgainstEveryTier(t *testing.T) {
	skip := ratelimit.Rule{Name: "skip_health_checks", Action: ratelimit.ActionSkip,
		Match: map[string]ratelimit.Matcher{"path": ratelimit.OneOf("/healthz", "/readyz")}}
	incident := rule("incident", 2)
	incident.Match = map[string]ratelimit.Matcher{}
	defaults := []ratelimit.Rule{skip, rule("per_user", 10), {Name: "late_skip", Action: ratelimit.ActionSkip}}
	overridden := rule("skip_health_checks", 1)
	tests := []struct {
		name string
		set  tiers.Set
		want string
	}{
		{"published", tiers.Set{Published: []ratelimit.Rule{incident}, Defaults: defaults},
			"[default/skip_health_checks published/incident default/per_user default/late_skip]"},
		{"file", tiers.Set{File: []ratelimit.Rule{incident}, Defaults: defaults},
			"[default/skip_health_checks file/incident default/per_user default/late_skip]"},
		{"remote", tiers.Set{Remote: []ratelimit.Rule{incident}, Defaults: defaults},
			"[default/skip_health_checks remote/incident default/per_user default/late_skip]"},
		{"overridden by name", tiers.Set{Published: []ratelimit.Rule{incident, overridden}, Defaults: defaults},
			"[published/incident published/skip_health_checks default/per_user default/late_skip]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var listed []string
			for _, r := range tt.set.Rules() {
				if r.OverriddenBy == "" {
					listed = append(listed, r.Tier+"/"+r.Rule.Name)
				}
			}
			if fmt.Sprint(listed) != tt.want {
				t.Fatalf("Rules = %v\nwant    %s", listed, tt.want)
			}
			var merged []string
			for _, r := range tt.set.Merged() {
				merged = append(merged, r.Name)
			}
			var names []string
			for _, l := range listed {
				names = append(names, l[strings.Index(l, "/")+1:])
			}
			if fmt.Sprint(merged) != fmt.Sprint(names) {
				t.Fatalf("Merged = %v, Rules lists %v", merged, names)
			}
		})
	}
}

func TestShadowedExemptions(t *testing.T) {
	defaults := []ratelimit.Rule{{Name: "skip_health_checks", Action: ratelimit.ActionSkip,
		Match: map[string]ratelimit.Matcher{"path": ratelimit.OneOf("/healthz", "/readyz")}}}
	withMatch := func(r ratelimit.Rule, m map[string]ratelimit.Matcher) ratelimit.Rule { r.Match = m; return r }
	tests := []struct {
		name string
		rule ratelimit.Rule
		want string // a substring of the one warning, "" for none
	}{
		{"match all", rule("incident", 2), `"incident" matches requests that the default exemption "skip_health_checks" skips`},
		{"same path", withMatch(rule("x", 2), map[string]ratelimit.Matcher{"path": ratelimit.Equal("/healthz")}), "skips"},
		{"other path", withMatch(rule("x", 2), map[string]ratelimit.Matcher{"path": ratelimit.Equal("/api")}), ""},
		{"regex path", withMatch(rule("x", 2), map[string]ratelimit.Matcher{"path": ratelimit.Regex("^/")}), "skips"},
		{"regex of one exempted path", withMatch(rule("x", 2), map[string]ratelimit.Matcher{"path": ratelimit.Regex("ready")}), "skips"},
		// The template's example sign-in rule: its regex matches neither
		// exempted path, so it never sees a probe.
		{"regex of no exempted path", withMatch(rule("x", 2), map[string]ratelimit.Matcher{"path": ratelimit.Regex("^/(users/)?sign_in$")}), ""},
		{"override by name", rule("skip_health_checks", 2), `replaces the exemption "skip_health_checks"`},
		{"a skip", ratelimit.Rule{Name: "skip_more", Action: ratelimit.ActionSkip}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tiers.ShadowedExemptions(tt.rule, defaults)
			switch {
			case tt.want == "" && len(got) != 0:
				t.Fatalf("warnings %q, want none", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
				t.Fatalf("warnings %q, want one with %q", got, tt.want)
			}
		})
	}
}

// A higher tier that replaces an exemption by name lifts it: a rule of any
// higher tier is not told that the exemption "still holds" for it.
func TestShadowedExemptionsReplacedByName(t *testing.T) {
	defaults := []ratelimit.Rule{{Name: "skip_health_checks", Action: ratelimit.ActionSkip,
		Match: map[string]ratelimit.Matcher{"path": ratelimit.OneOf("/healthz", "/readyz")}}}
	replacement := ratelimit.Rule{Name: "skip_health_checks", Action: ratelimit.ActionSkip,
		Match: map[string]ratelimit.Matcher{"path": ratelimit.OneOf("/healthz", "/readyz", "/livez")}}
	incident := rule("incident", 2)
	if got := tiers.ShadowedExemptions(incident, defaults, []ratelimit.Rule{replacement, incident}); len(got) != 0 {
		t.Errorf("replaced in the rule's tier: warnings %q, want none", got)
	}
	if got := tiers.ShadowedExemptions(incident, defaults, nil, []ratelimit.Rule{replacement}, []ratelimit.Rule{incident}); len(got) != 0 {
		t.Errorf("replaced in another higher tier: warnings %q, want none", got)
	}
	if got := tiers.ShadowedExemptions(incident, defaults, []ratelimit.Rule{incident}); len(got) != 1 {
		t.Errorf("not replaced: warnings %q, want one", got)
	}
	counting := rule("skip_health_checks", 2)
	if got := tiers.ShadowedExemptions(counting, defaults, []ratelimit.Rule{counting}); len(got) != 1 || !strings.Contains(got[0], "replaces the exemption") {
		t.Errorf("the replacing rule counts: warnings %q, want the replacement named", got)
	}
}

// An exemption's regex overlaps a rule's values only when it matches one of
// them, and a match on GET covers HEAD (servers answer HEAD with the GET
// handler), as the limiter evaluates them.
func TestShadowedExemptionsPerMatcher(t *testing.T) {
	skip := func(m map[string]ratelimit.Matcher) []ratelimit.Rule {
		return []ratelimit.Rule{{Name: "skip_probes", Action: ratelimit.ActionSkip, Match: m}}
	}
	limit := func(m map[string]ratelimit.Matcher) ratelimit.Rule { r := rule("x", 2); r.Match = m; return r }
	tests := []struct {
		name       string
		exemption  map[string]ratelimit.Matcher
		rule       map[string]ratelimit.Matcher
		wantWarned bool
	}{
		{"exemption regex, rule path it matches", map[string]ratelimit.Matcher{"path": ratelimit.Regex("^/health")},
			map[string]ratelimit.Matcher{"path": ratelimit.Equal("/healthz")}, true},
		{"exemption regex, rule paths it misses", map[string]ratelimit.Matcher{"path": ratelimit.Regex("^/health")},
			map[string]ratelimit.Matcher{"path": ratelimit.OneOf("/api", "/login")}, false},
		{"two regexes", map[string]ratelimit.Matcher{"path": ratelimit.Regex("^/health")},
			map[string]ratelimit.Matcher{"path": ratelimit.Regex("^/api")}, true},
		{"exemption GET, rule HEAD", map[string]ratelimit.Matcher{ratelimit.PropertyMethod: ratelimit.Equal("GET")},
			map[string]ratelimit.Matcher{ratelimit.PropertyMethod: ratelimit.Regex("^HEAD$")}, true},
		{"exemption HEAD, rule GET", map[string]ratelimit.Matcher{ratelimit.PropertyMethod: ratelimit.Regex("^HEAD$")},
			map[string]ratelimit.Matcher{ratelimit.PropertyMethod: ratelimit.OneOf("GET")}, true},
		{"exemption GET, rule POST", map[string]ratelimit.Matcher{ratelimit.PropertyMethod: ratelimit.Equal("GET")},
			map[string]ratelimit.Matcher{ratelimit.PropertyMethod: ratelimit.Regex("^POST$")}, false},
		// A regex that accepts GET accepts HEAD too, against values as well.
		{"exemption regex GET, rule HEAD", map[string]ratelimit.Matcher{ratelimit.PropertyMethod: ratelimit.Regex("^GET$")},
			map[string]ratelimit.Matcher{ratelimit.PropertyMethod: ratelimit.Equal("HEAD")}, true},
		{"exemption HEAD, rule regex GET", map[string]ratelimit.Matcher{ratelimit.PropertyMethod: ratelimit.OneOf("HEAD")},
			map[string]ratelimit.Matcher{ratelimit.PropertyMethod: ratelimit.Regex("^GET$")}, true},
		{"exemption regex GET, rule POST", map[string]ratelimit.Matcher{ratelimit.PropertyMethod: ratelimit.Regex("^GET$")},
			map[string]ratelimit.Matcher{ratelimit.PropertyMethod: ratelimit.Equal("POST")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tiers.ShadowedExemptions(limit(tt.rule), skip(tt.exemption))
			if warned := len(got) != 0; warned != tt.wantWarned {
				t.Fatalf("warnings %q, want warned %v", got, tt.wantWarned)
			}
		})
	}
}

// TestMergeKeepsADuplicateOfAnExemption: two rules of one name in one tier
// are for the limiter to reject, also when the first is an exemption; the
// merge dropped the second by name, and the limiter ran without it.
func TestMergeKeepsADuplicateOfAnExemption(t *testing.T) {
	skip := ratelimit.Rule{Name: "skip_health_checks", Action: ratelimit.ActionSkip,
		Match: map[string]ratelimit.Matcher{"path": ratelimit.Equal("/healthz")}}
	set := tiers.Set{Defaults: []ratelimit.Rule{skip, rule("per_user", 10), rule("skip_health_checks", 1)}}
	var listed []string
	for _, r := range set.Rules() {
		listed = append(listed, fmt.Sprintf("%s/%s=%d", r.Tier, r.Rule.Name, r.Rule.Limit))
	}
	if want := "[default/skip_health_checks=0 default/per_user=10 default/skip_health_checks=1]"; fmt.Sprint(listed) != want {
		t.Fatalf("Rules = %v, want %s", listed, want)
	}
	merged := set.Merged()
	if got := limits(merged); got != "[skip_health_checks=0 per_user=10 skip_health_checks=1]" {
		t.Fatalf("Merged = %s", got)
	}
	_, err := ratelimit.New(ratelimit.Config{Name: "lim", Store: ratelimit.NewMemoryStore(), Rules: merged})
	if err == nil || !strings.Contains(err.Error(), "duplicate rule name") {
		t.Fatalf("New on the merge: %v, want the duplicate refused", err)
	}
}
