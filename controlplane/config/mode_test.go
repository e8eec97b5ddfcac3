package config

import (
	"strings"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// TestLimiterModeInFiles: rate_limits.yaml and a publish request set a
// limiter's mode beside its rules; a bad value is rejected whole with its line.
func TestLimiterModeInFiles(t *testing.T) {
	avail := mustAvailable(t, guardedAvailable)
	for _, tc := range []struct {
		name, yaml string
		want       map[string]configv1.Mode
		err        string
	}{
		{
			name: "shadow with rules, bare list stays unset",
			yaml: "rate_limits:\n  open:\n    mode: shadow\n    rules:\n      - {name: per_ip, limit: 5, period_s: 60, action: limit, characteristics: [ip]}\n  guarded:\n    - {name: per_ip, limit: 5, period_s: 60, action: limit, characteristics: [ip]}\n",
			want: map[string]configv1.Mode{"open": configv1.Mode_MODE_SHADOW, "guarded": configv1.Mode_MODE_UNSPECIFIED, "locked": configv1.Mode_MODE_UNSPECIFIED},
		},
		{
			name: "mode alone with an empty rule list",
			yaml: "rate_limits:\n  open: {mode: enforce, rules: []}\n",
			want: map[string]configv1.Mode{"open": configv1.Mode_MODE_ENFORCE},
		},
		{
			name: "unknown mode",
			yaml: "rate_limits:\n  open:\n    mode: dry_run\n    rules: []\n",
			err:  "rate_limits.yaml:3:11: open: mode must be one of enforce, shadow, got the value \"dry_run\"",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rl, err := ParseRateLimits("rate_limits.yaml", []byte(tc.yaml), avail)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for lim, want := range tc.want {
				if got := rl.Mode(lim); got != want {
					t.Errorf("Mode(%s) = %v, want %v", lim, got, want)
				}
			}
			req, err := ParsePublishRulesRequest("publish.yaml", []byte(tc.yaml), avail)
			if err != nil {
				t.Fatal(err)
			}
			for lim, want := range tc.want {
				if got := req.GetRateLimits()[lim].GetMode(); got != want {
					t.Errorf("publish request mode of %s = %v, want %v", lim, got, want)
				}
			}
		})
	}
}

// TestLimiterModeJSON: the stored document writes a tier's mode before its
// rules and reads it back; an unknown value is a validation error.
func TestLimiterModeJSON(t *testing.T) {
	doc := &configv1.LimiterRules{
		PublishedRules: &configv1.RuleList{Mode: configv1.Mode_MODE_SHADOW},
		DefaultRules:   &configv1.RuleList{Rules: []*configv1.Rule{autocompleteRule(300)}},
	}
	b, err := MarshalLimiterRules(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"default_rules":{"rules":[{"name":"limit_user_autocompletes_by_user","limit":300,"period_s":60,"action":"limit","characteristics":["user"],"match":{}}]},"published_rules":{"mode":"shadow","rules":[]}}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	back, err := UnmarshalLimiterRules(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.GetPublishedRules().GetMode() != configv1.Mode_MODE_SHADOW || back.GetDefaultRules().GetMode() != configv1.Mode_MODE_UNSPECIFIED {
		t.Fatalf("modes after round trip: %v, %v", back.GetPublishedRules().GetMode(), back.GetDefaultRules().GetMode())
	}
	if _, err := UnmarshalLimiterRules([]byte(`{"file_rules":{"mode":"off","rules":[]}}`)); err == nil || !strings.Contains(err.Error(), "mode must be one of enforce, shadow") {
		t.Fatalf("unknown mode: %v", err)
	}
}

func TestModeConversions(t *testing.T) {
	for _, tc := range []struct {
		m    configv1.Mode
		word string
		e    ratelimit.Enforcement
		ok   bool
	}{
		{configv1.Mode_MODE_UNSPECIFIED, "", ratelimit.Enforce, false},
		{configv1.Mode_MODE_ENFORCE, "enforce", ratelimit.Enforce, true},
		{configv1.Mode_MODE_SHADOW, "shadow", ratelimit.Shadow, true},
	} {
		if w := ModeWord(tc.m); w != tc.word {
			t.Errorf("ModeWord(%v) = %q", tc.m, w)
		}
		e, ok := ModeFromProto(tc.m)
		if e != tc.e || ok != tc.ok {
			t.Errorf("ModeFromProto(%v) = %v, %v", tc.m, e, ok)
		}
		if ok && ModeToProto(e) != tc.m {
			t.Errorf("ModeToProto(%v) = %v", e, ModeToProto(e))
		}
	}
}

func TestParseEnforcement(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ratelimit.Enforcement
		ok   bool
	}{{"enforce", ratelimit.Enforce, true}, {"shadow", ratelimit.Shadow, true}, {"Shadow", 0, false}, {"", 0, false}} {
		got, err := ParseEnforcement(tc.in)
		if (err == nil) != tc.ok || (tc.ok && (got != tc.want || got.String() != tc.in)) {
			t.Errorf("ParseEnforcement(%q) = %v, %v", tc.in, got, err)
		}
	}
}
