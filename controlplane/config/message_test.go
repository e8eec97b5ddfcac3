package config

import (
	"strings"
	"testing"

	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

func TestParseMessageChecksEveryRuleList(t *testing.T) {
	// LimiterRules holds three rule lists and no limiter field: each list gets
	// the checks that need no limiter spec (unique names here).
	doc := "file_rules:\n  - {name: a, action: limit, limit: 1, period_s: 1}\n  - {name: a, action: limit, limit: 2, period_s: 1}\n" +
		"default_rules:\n  - {name: b, action: log, limit: 0, period_s: 1}\n"
	err := ParseMessage("o.yaml", []byte(doc), &configv1.LimiterRules{}, nil)
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{`o.yaml:3:12: a: rule name "a" is used twice in this limiter (first at line 2)`, "o.yaml:5:35: b: limit must be at least 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := ParseMessage("o.yaml", []byte("file_rules:\n  - {name: a, action: skip}\n"), &configv1.LimiterRules{}, nil); err != nil {
		t.Errorf("valid document: %v", err)
	}
}

// A message has no lines: a duplicate rule name points at the first one's
// place in the list, not at "line 0".
func TestDuplicateRuleInMessage(t *testing.T) {
	r := &configv1.Rule{Name: "r", Action: configv1.Action_ACTION_SKIP}
	other := &configv1.Rule{Name: "o", Action: configv1.Action_ACTION_SKIP}
	err := ValidateRuleList("lim", &configv1.RuleList{Rules: []*configv1.Rule{other, r, r}}, nil)
	if want := `rule name "r" is used twice in this limiter (first at rules[1])`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want it to contain %q", err, want)
	}
}

func TestValidateRuleListCrossChecks(t *testing.T) {
	available := mustAvailable(t, availableBase)
	tests := []struct {
		name, limiter string
		rule          *configv1.Rule
		want          string // "" valid
	}{
		{"valid", "lim", &configv1.Rule{Name: "r", Action: configv1.Action_ACTION_LIMIT, Limit: new(uint32(5)), PeriodS: new(uint32(60)), Characteristics: []string{"user"}}, ""},
		{"unknown limiter", "nope", &configv1.Rule{Name: "r", Action: configv1.Action_ACTION_SKIP}, `no limiter "nope"`},
		{"unknown property", "lim", &configv1.Rule{Name: "r", Action: configv1.Action_ACTION_LIMIT, Limit: new(uint32(5)), PeriodS: new(uint32(60)), Characteristics: []string{"plan"}}, `characteristic "plan" is not one of the limiter's available_properties`},
		{"schema", "lim", &configv1.Rule{Name: "r", Action: configv1.Action_ACTION_LIMIT}, "limit and log rules require limit and period_s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateRuleList(tt.limiter, &configv1.RuleList{Rules: []*configv1.Rule{tt.rule}}, available)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// A name of a hand-written document is what is being checked: an error's
// limiter/rule label writes one a reader could not tell from another (a bidi
// override, a zero-width space, blanks at an end) quoted, with escapes, as
// the message quotes it; it wrote it raw, and U+202E turned the rest of the
// line around in a terminal and on the admin page.
func TestErrorLabelEscapesNames(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{Limiter: "api", Rule: "per_ip", Message: "m"}, "api/per_ip: m"},
		{Error{Limiter: "api", Rule: "#3", Message: "m"}, "api/#3: m"},
		{Error{Limiter: "api", Rule: "evil\u202epmet", Message: "m"}, `api/"evil\u202epmet": m`},
		{Error{Limiter: "a\u200bpi", Message: "m"}, `"a\u200bpi": m`},
		{Error{Rule: " padded", Message: "m"}, `" padded": m`},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%#v: %q, want %q", tc.e, got, tc.want)
		}
	}
}
