package config

import (
	"context"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

func TestRuleProtoRoundTrip(t *testing.T) {
	rules := []*configv1.Rule{
		{Name: "skip_health", Action: configv1.Action_ACTION_SKIP, Match: map[string]*configv1.MatchValue{
			"path": {Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: []string{"/-/health", "/-/ready"}}}},
		}},
		{Name: "every_field", Description: "d", Action: configv1.Action_ACTION_LOG, Characteristics: []string{"ip", "user"}, CountMissing: true,
			Limit: proto.Uint32(math.MaxUint32), PeriodS: proto.Uint32(3600), BanForS: proto.Uint32(900),
			Match: map[string]*configv1.MatchValue{
				"user": {Kind: &configv1.MatchValue_Equality{Equality: "<anonymous>"}},
				"path": {Kind: &configv1.MatchValue_Regex{Regex: `^/api/v\d+/`}},
			}},
		{Name: "distinct", Action: configv1.Action_ACTION_LIMIT, Limit: proto.Uint32(10), PeriodS: proto.Uint32(1), CountDistinct: "user"},
	}
	for _, r := range rules {
		t.Run(r.GetName(), func(t *testing.T) {
			core, err := RuleFromProto(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := core.Validate(); err != nil {
				t.Fatalf("the core rejects the converted rule: %v", err)
			}
			back, err := RuleToProto(core)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(back, r) {
				t.Fatalf("round trip = %v, want %v", back, r)
			}
		})
	}
}

func TestCoreRuleRoundTrip(t *testing.T) {
	rules := []ratelimit.Rule{
		{Name: "a", Action: ratelimit.ActionLimit, Limit: 200, Period: time.Minute,
			Characteristics: []string{"user"}, BanFor: time.Hour, Description: "d",
			Match: map[string]ratelimit.Matcher{"request_type": ratelimit.Equal("api"), "path": ratelimit.Regex("^/x"), "plan": ratelimit.OneOf("free", "pro")}},
		{Name: "b", Action: ratelimit.ActionSkip},
		{Name: "c", Action: ratelimit.ActionLog, Limit: 1, Period: time.Second, CountDistinct: "user"},
	}
	list, err := RulesToProto(rules)
	if err != nil {
		t.Fatal(err)
	}
	back, err := RulesFromProto(list)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rules) {
		t.Fatalf("round trip = %+v\nwant %+v", back, rules)
	}

	// An empty action is the core's default, limit, and is stored explicitly.
	p, err := RuleToProto(ratelimit.Rule{Name: "d", Limit: 1, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if p.GetAction() != configv1.Action_ACTION_LIMIT {
		t.Fatalf("empty action stored as %v", p.GetAction())
	}
}

func TestRuleToProtoErrors(t *testing.T) {
	limitFn := func(context.Context) (int64, error) { return 5, nil }
	periodFn := func(context.Context) (time.Duration, error) { return time.Minute, nil }
	minute := time.Minute
	tests := []struct {
		name string
		rule ratelimit.Rule
		want string
	}{
		{"limit func", ratelimit.Rule{Name: "r", LimitFunc: limitFn, Period: minute},
			"rule r: limit is a LimitFunc: only a resolved, static limit can be stored (set Limit)"},
		{"period func", ratelimit.Rule{Name: "r", Limit: 1, PeriodFunc: periodFn},
			"rule r: period is a PeriodFunc: only a resolved, static period can be stored (set Period)"},
		{"fractional period", ratelimit.Rule{Name: "r", Limit: 1, Period: 1500 * time.Millisecond},
			"rule r: period 1.5s is not a whole number of seconds from 1s to 4294967295s"},
		{"short ban", ratelimit.Rule{Name: "r", Limit: 1, Period: minute, BanFor: 500 * time.Millisecond},
			"rule r: ban_for 500ms is not a whole number of seconds from 1s to 4294967295s"},
		{"limit too large", ratelimit.Rule{Name: "r", Limit: math.MaxUint32 + 1, Period: minute},
			"rule r: limit 4294967296 is outside 1..4294967295"},
		{"unknown action", ratelimit.Rule{Name: "r", Action: ratelimit.Action(ratelimit.ActionBlock)},
			`rule r: action "block" is not limit, log or skip`},
		{"empty matcher", ratelimit.Rule{Name: "r", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"ip": {}}},
			`rule r: match "ip": empty matcher`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := RuleToProto(tt.rule)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("RuleToProto = %v, %v; want error %q", p, err, tt.want)
			}
			if _, err := RulesToProto([]ratelimit.Rule{{Name: "ok", Action: ratelimit.ActionSkip}, tt.rule}); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("RulesToProto error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestRuleFromProtoErrors(t *testing.T) {
	if _, err := RuleFromProto(&configv1.Rule{Name: "r"}); err == nil || err.Error() != "rule r: action ACTION_UNSPECIFIED is not limit, log or skip" {
		t.Fatalf("unspecified action: %v", err)
	}
	_, err := RulesFromProto(&configv1.RuleList{Rules: []*configv1.Rule{{Name: "r", Action: configv1.Action_ACTION_SKIP, Match: map[string]*configv1.MatchValue{"ip": {}}}}})
	if err == nil || err.Error() != `rule r: match "ip" has no value` {
		t.Fatalf("empty match value: %v", err)
	}
}

func TestDefaultRuleToRuleCopies(t *testing.T) {
	d := &configv1.DefaultRule{Name: "r", Action: configv1.Action_ACTION_LIMIT, Limit: proto.Uint32(5), PeriodS: proto.Uint32(60),
		Characteristics: []string{"ip"}, Match: map[string]*configv1.MatchValue{"ip": {Kind: &configv1.MatchValue_Equality{Equality: "x"}}}}
	r := DefaultRuleToRule(d)
	want := &configv1.Rule{Name: "r", Action: configv1.Action_ACTION_LIMIT, Limit: proto.Uint32(5), PeriodS: proto.Uint32(60),
		Characteristics: []string{"ip"}, Match: map[string]*configv1.MatchValue{"ip": {Kind: &configv1.MatchValue_Equality{Equality: "x"}}}}
	if !proto.Equal(r, want) {
		t.Fatalf("DefaultRuleToRule = %v, want %v", r, want)
	}
	*d.Limit = 6
	d.Characteristics[0] = "user"
	d.Match["ip"].Kind = &configv1.MatchValue_Regex{Regex: "y"}
	if !proto.Equal(r, want) {
		t.Fatalf("the converted rule shares memory with the default rule: %v", r)
	}
}

// TestAlgorithmConversion: a rule's algorithm and burst survive the way
// from a file through the core rule and back, and a rule without them stays
// a fixed window.
func TestAlgorithmConversion(t *testing.T) {
	available := mustAvailable(t, guardedAvailable)
	r, err := ParseRateLimits("r.yaml", []byte(`rate_limits:
  open:
    - {name: bucket, limit: 10, period_s: 60, action: limit, algorithm: token_bucket, burst: 30}
    - {name: sliding, limit: 10, period_s: 60, action: log, algorithm: sliding_window}
    - {name: fixed, limit: 10, period_s: 60, action: limit}
`), available)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := RulesFromProto(r.Proto.GetRateLimits()["open"])
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		alg   ratelimit.Algorithm
		burst int64
	}{{ratelimit.TokenBucket, 30}, {ratelimit.SlidingWindow, 0}, {"", 0}}
	for i, w := range want {
		if rules[i].Algorithm != w.alg || rules[i].Burst != w.burst {
			t.Fatalf("rule %s: algorithm %q burst %d, want %q %d", rules[i].Name, rules[i].Algorithm, rules[i].Burst, w.alg, w.burst)
		}
		back, err := RuleToProto(rules[i])
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(back, r.Proto.GetRateLimits()["open"].GetRules()[i]) {
			t.Fatalf("rule %s: back to proto %v", rules[i].Name, back)
		}
	}
	if _, err := RuleToProto(ratelimit.Rule{Name: "x", Action: ratelimit.ActionLimit, Algorithm: "leaky"}); err == nil || !strings.Contains(err.Error(), `algorithm "leaky"`) {
		t.Fatalf("RuleToProto of an unknown algorithm: %v", err)
	}
	d := DefaultRuleToRule(&configv1.DefaultRule{Name: "d", Action: configv1.Action_ACTION_LIMIT, Algorithm: configv1.Algorithm_ALGORITHM_TOKEN_BUCKET, Burst: proto.Uint32(3)})
	if d.GetAlgorithm() != configv1.Algorithm_ALGORITHM_TOKEN_BUCKET || d.GetBurst() != 3 {
		t.Fatalf("DefaultRuleToRule dropped the algorithm: %v", d)
	}
}
