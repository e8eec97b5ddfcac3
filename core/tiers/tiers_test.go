package tiers_test

import (
	"fmt"
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
