package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func rulesN(n int, prefix string) []Rule {
	out := make([]Rule, n)
	for i := range out {
		out[i] = Rule{Name: fmt.Sprintf("%s%d", prefix, i), Limit: 10, Period: time.Minute}
	}
	return out
}

func TestRuleBounds(t *testing.T) {
	props := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("p%d", i)
		}
		return out
	}
	match := func(n int) map[string]Matcher {
		m := map[string]Matcher{}
		for _, p := range props(n) {
			m[p] = Equal("x")
		}
		return m
	}
	values := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	long := func(n int) string { return strings.Repeat("p", n) }
	one := func(r Rule) []Rule { r.Name, r.Limit, r.Period = "r", 1, time.Minute; return []Rule{r} }
	tests := []struct {
		name  string
		rules []Rule
		want  string // "" when valid
	}{
		{"MaxRules rules", rulesN(MaxRules, "r"), ""},
		{"one rule too many", rulesN(MaxRules+1, "r"), "1025 rules, at most 1024"},
		{"MaxCharacteristics", one(Rule{Characteristics: props(MaxCharacteristics)}), ""},
		{"too many characteristics", one(Rule{Characteristics: props(MaxCharacteristics + 1)}), "17 characteristics, at most 16"},
		{"MaxMatchEntries", one(Rule{Match: match(MaxMatchEntries)}), ""},
		{"too many match entries", one(Rule{Match: match(MaxMatchEntries + 1)}), "33 match entries, at most 32"},
		{"MaxOneOfValues", one(Rule{Match: map[string]Matcher{"p": OneOf(values(MaxOneOfValues)...)}}), ""},
		{"too many one_of values", one(Rule{Match: map[string]Matcher{"p": OneOf(values(MaxOneOfValues + 1)...)}}), "one_of has 1025 values, at most 1024"},
		{"MaxRegexLen", one(Rule{Match: map[string]Matcher{"p": Regex(strings.Repeat("a", MaxRegexLen))}}), ""},
		{"regex too long", one(Rule{Match: map[string]Matcher{"p": Regex(strings.Repeat("a", MaxRegexLen+1))}}), "regex is 1025 bytes, the limit is 1024"},
		{"MaxPropertyLen", one(Rule{Match: map[string]Matcher{long(MaxPropertyLen): Equal("x")}, Characteristics: []string{long(MaxPropertyLen)}}), ""},
		{"MaxDescriptionLen characters", one(Rule{Description: strings.Repeat("説", MaxDescriptionLen)}), ""},
		{"description too long", one(Rule{Description: strings.Repeat("説", MaxDescriptionLen+1)}), "description is 1025 characters, at most 1024"},
		{"match property too long", one(Rule{Match: map[string]Matcher{long(MaxPropertyLen + 1): Equal("x")}}), "is 65 bytes, at most 64"},
		{"characteristic too long", one(Rule{Characteristics: []string{long(MaxPropertyLen + 1)}}), "characteristic \"" + long(MaxPropertyLen) + "\"... is 65 bytes, at most 64"},
		{"count_distinct property too long", one(Rule{CountDistinct: long(MaxPropertyLen + 1)}), "count_distinct property \"" + long(MaxPropertyLen) + "\"... is 65 bytes, at most 64"},
		{"MaxMatchValueLen", one(Rule{Match: map[string]Matcher{"p": Equal(long(MaxMatchValueLen)), "q": OneOf("a", long(MaxMatchValueLen))}}), ""},
		{"equality value too long", one(Rule{Match: map[string]Matcher{"p": Equal(long(MaxMatchValueLen + 1))}}), `match "p": the value is 4097 bytes, at most 4096`},
		{"one_of value too long", one(Rule{Match: map[string]Matcher{"p": OneOf("a", long(1<<20))}}), `match "p": one_of value #2 is 1048576 bytes, at most 4096`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, newErr := New(Config{Name: "l", Store: NewMemoryStore(), Rules: tt.rules})
			_, compileErr := CompileRules("", tt.rules)
			l, err := New(Config{Name: "l", Store: NewMemoryStore()})
			if err != nil {
				t.Fatal(err)
			}
			setErr := l.SetRules(tt.rules)
			for what, err := range map[string]error{"New": newErr, "CompileRules": compileErr, "SetRules": setErr} {
				switch {
				case tt.want == "" && err != nil:
					t.Errorf("%s: %v", what, err)
				case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
					t.Errorf("%s: error %v, want one containing %q", what, err, tt.want)
				}
			}
			if tt.want != "" && len(l.Rules()) != 0 {
				t.Errorf("SetRules applied %d rules of a list it refused", len(l.Rules()))
			}
		})
	}
}

// A per-request tier that would take a check past MaxRules is left out of
// that check: the check costs no more than the limiter's own rules, and says
// it was degraded instead of failing open.
func TestPerRequestTierOverMaxRulesIsLeftOut(t *testing.T) {
	ctx := context.Background()
	local := append(rulesN(MaxRules-1, "local"), Rule{Name: "tight", Limit: 1, Period: time.Minute})
	src := &staticSource{}
	l, err := New(Config{Name: "t", Store: NewMemoryStore(), Rules: local, RuleSource: src.RulesFor})
	if err != nil {
		t.Fatal(err)
	}
	// Replacing a local rule by name keeps the merge at MaxRules: applied.
	same, err := CompileRules("remote", []Rule{{Name: "tight", Limit: 3, Period: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	src.set = same
	if r := l.Check(ctx, Identifier{"k": "a"}); r.Degraded || len(r.Evaluations) != MaxRules || !r.Evaluations[0].PerRequest {
		t.Fatalf("override by name: degraded %v, %d evaluations", r.Degraded, len(r.Evaluations))
	}
	// A new name would make MaxRules+1: the tier is left out.
	extra, err := CompileRules("remote", []Rule{{Name: "extra", Limit: 1, Period: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	src.set = extra
	r := l.Check(ctx, Identifier{"k": "b"})
	if !r.Degraded || r.Err != nil || len(r.Evaluations) != MaxRules {
		t.Fatalf("over MaxRules: degraded %v, err %v, %d evaluations", r.Degraded, r.Err, len(r.Evaluations))
	}
	for _, ev := range r.Evaluations {
		if ev.PerRequest {
			t.Fatalf("rule %s of the left-out tier was evaluated", ev.Rule.Name)
		}
	}
	if r := l.Check(ctx, Identifier{"k": "b"}); !r.Blocked() || r.Rule.Name != "tight" {
		t.Fatalf("the local rules must still limit: %+v", r.Rule)
	}
}

// A refused rule's error quotes at most MaxPropertyLen characters of a
// property name, action or algorithm it holds (%.*q cuts by characters, so a
// few times as many bytes at most), as the length checks do: the string is
// the caller's, of any size, and the error reaches logs and answers whole.
func TestRuleErrorQuotesPropertiesInPart(t *testing.T) {
	huge := strings.Repeat("p", 1<<20)
	one := func(r Rule) []Rule { r.Name, r.Limit, r.Period = "r", 1, time.Minute; return []Rule{r} }
	tests := []struct {
		name  string
		rules []Rule
		want  string
	}{
		{"empty matcher", one(Rule{Match: map[string]Matcher{huge: {}}}), "empty matcher"},
		{"nil value", one(Rule{Match: map[string]Matcher{huge: Equal(nil)}}), "a nil value"},
		{"invalid regex", one(Rule{Match: map[string]Matcher{huge: Regex("(")}}), "invalid RE2 regex"},
		{"characteristic twice", one(Rule{Characteristics: []string{huge, huge}}), "is listed twice"},
		{"action", one(Rule{Action: Action(huge)}), "is not limit, log or skip"},
		{"algorithm", one(Rule{Algorithm: Algorithm(huge)}), "is not fixed_window, sliding_window or token_bucket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CompileRules("", tt.rules)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if n := len(err.Error()); n > 4<<10 {
				t.Fatalf("error of %d bytes: it quotes the whole property name", n)
			}
		})
	}
}
