package config

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// designStored is the design's example of a stored document
// (docs/design.md#the-rule-store), byte for byte.
const designStored = `{"default_rules":{"rules":[{"name":"limit_user_autocompletes_by_user","limit":300,"period_s":60,"action":"limit","characteristics":["user"],"match":{}}]},"published_rules":{"rules":[{"name":"limit_user_autocompletes_by_user","limit":25,"period_s":60,"action":"limit","characteristics":["user"],"match":{}}]}}`

func autocompleteRule(limit uint32) *configv1.Rule {
	return &configv1.Rule{
		Name:            "limit_user_autocompletes_by_user",
		Characteristics: []string{"user"},
		Limit:           proto.Uint32(limit),
		PeriodS:         proto.Uint32(60),
		Action:          configv1.Action_ACTION_LIMIT,
	}
}

func TestMarshalLimiterRulesDesignExample(t *testing.T) {
	doc := &configv1.LimiterRules{
		DefaultRules:   &configv1.RuleList{Rules: []*configv1.Rule{autocompleteRule(300)}},
		PublishedRules: &configv1.RuleList{Rules: []*configv1.Rule{autocompleteRule(25)}},
	}
	got, err := MarshalLimiterRules(doc)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != designStored {
		t.Fatalf("bytes differ from the design's example\n got: %s\nwant: %s", got, designStored)
	}
	back, err := UnmarshalLimiterRules([]byte(designStored))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, doc) {
		t.Fatalf("unmarshal of the design's example = %v, want %v", back, doc)
	}
}

func TestLimiterRulesRoundTrip(t *testing.T) {
	full := &configv1.Rule{
		Name:            "every_field",
		Description:     `quotes " and <html> & unicode é`,
		Action:          configv1.Action_ACTION_LOG,
		Characteristics: []string{"ip", "user"},
		CountMissing:    true,
		Limit:           proto.Uint32(4294967295),
		PeriodS:         proto.Uint32(1),
		BanForS:         proto.Uint32(900),
		Match: map[string]*configv1.MatchValue{
			"user":  {Kind: &configv1.MatchValue_Equality{Equality: "<anonymous>"}},
			"path":  {Kind: &configv1.MatchValue_Regex{Regex: `^/api/v\d+/`}},
			"plan":  {Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: []string{"free", "bronze"}}}},
			"empty": {Kind: &configv1.MatchValue_Equality{Equality: ""}},
		},
	}
	distinct := &configv1.Rule{Name: "distinct", Action: configv1.Action_ACTION_LIMIT, Limit: proto.Uint32(10), PeriodS: proto.Uint32(3600), CountDistinct: "user", Characteristics: []string{"ip"}}
	skip := &configv1.Rule{Name: "skip_all", Action: configv1.Action_ACTION_SKIP}
	bucket := &configv1.Rule{Name: "bucket", Action: configv1.Action_ACTION_LIMIT, Limit: proto.Uint32(10), PeriodS: proto.Uint32(60),
		Algorithm: configv1.Algorithm_ALGORITHM_TOKEN_BUCKET, Burst: proto.Uint32(25), BanForS: proto.Uint32(5)}
	sliding := &configv1.Rule{Name: "sliding", Action: configv1.Action_ACTION_LOG, Limit: proto.Uint32(10), PeriodS: proto.Uint32(60),
		Algorithm: configv1.Algorithm_ALGORITHM_SLIDING_WINDOW}
	tests := []struct {
		name string
		doc  *configv1.LimiterRules
		want string
	}{
		{"empty document", &configv1.LimiterRules{}, `{}`},
		{"empty tier is kept", &configv1.LimiterRules{FileRules: &configv1.RuleList{}}, `{"file_rules":{"rules":[]}}`},
		{"every field", &configv1.LimiterRules{FileRules: &configv1.RuleList{Rules: []*configv1.Rule{full}}},
			`{"file_rules":{"rules":[{"name":"every_field","description":"quotes \" and <html> & unicode é","limit":4294967295,"period_s":1,"action":"log","characteristics":["ip","user"],"count_missing":true,"ban_for_s":900,"match":{"empty":"","path":{"regex":"^/api/v\\d+/"},"plan":{"one_of":["free","bronze"]},"user":"<anonymous>"}}]}}`},
		{"algorithms", &configv1.LimiterRules{PublishedRules: &configv1.RuleList{Rules: []*configv1.Rule{bucket, sliding}}},
			`{"published_rules":{"rules":[{"name":"bucket","limit":10,"period_s":60,"action":"limit","characteristics":[],"ban_for_s":5,"algorithm":"token_bucket","burst":25,"match":{}},{"name":"sliding","limit":10,"period_s":60,"action":"log","characteristics":[],"algorithm":"sliding_window","match":{}}]}}`},
		{"three tiers in alphabetical order", &configv1.LimiterRules{
			PublishedRules: &configv1.RuleList{Rules: []*configv1.Rule{skip}},
			FileRules:      &configv1.RuleList{Rules: []*configv1.Rule{distinct}},
			DefaultRules:   &configv1.RuleList{Rules: []*configv1.Rule{skip, distinct}},
		}, `{"default_rules":{"rules":[{"name":"skip_all","action":"skip","characteristics":[],"match":{}},{"name":"distinct","limit":10,"period_s":3600,"action":"limit","characteristics":["ip"],"count_distinct":"user","match":{}}]},"file_rules":{"rules":[{"name":"distinct","limit":10,"period_s":3600,"action":"limit","characteristics":["ip"],"count_distinct":"user","match":{}}]},"published_rules":{"rules":[{"name":"skip_all","action":"skip","characteristics":[],"match":{}}]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MarshalLimiterRules(tt.doc)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("marshal\n got: %s\nwant: %s", got, tt.want)
			}
			back, err := UnmarshalLimiterRules(got)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(back, tt.doc) {
				t.Fatalf("round trip = %v, want %v", back, tt.doc)
			}
		})
	}
}

func TestUnmarshalLimiterRulesErrors(t *testing.T) {
	tests := []struct {
		name, data string
		want       []string
	}{
		{"not JSON", `{"file_rules":`, []string{`1:15: invalid JSON: unexpected end of the document`}},
		{"bad token", `{"file_rules": nope}`, []string{`1:16: invalid JSON: invalid character 'o' in literal null (expecting 'u')`}},
		{"trailing data", `{} {}`, []string{`1:4: invalid JSON: unexpected data after the document`}},
		{"trailing comma", "{}\n,", []string{`2:1: invalid JSON: unexpected data after the document`}},
		{"empty", "", []string{`1:1: invalid JSON: unexpected end of the document`}},
		{"unknown tier", `{"fil_rules":{"rules":[]}}`, []string{`1:2: unknown field "fil_rules" (did you mean "file_rules"?)`}},
		{"unknown rule field", "{\"file_rules\":{\"rules\":[\n{\"name\":\"a\",\"action\":\"skip\",\"match\":{},\"characteristics\":[],\"colour\":1}]}}",
			[]string{`2:61: a: unknown field "colour"; a rule takes action, algorithm, ban_for_s, burst, characteristics, count_distinct, count_missing, description, limit, match, name, period_s`}},
		{"protojson enum spelling is not the stored spelling", `{"file_rules":{"rules":[{"name":"a","action":"ACTION_SKIP"}]}}`,
			[]string{`1:46: a: action must be one of limit, log, skip, got the value "ACTION_SKIP"`}},
		{"action is required in stored documents", `{"file_rules":{"rules":[{"name":"a","limit":1,"period_s":1}]}}`,
			[]string{`1:25: a: action is missing: it must be limit, log or skip`}},
		{"duplicate key", `{"file_rules":{"rules":[]},"file_rules":{"rules":[]}}`, []string{`1:28: field "file_rules" is given twice (first at line 1)`}},
		{"number as string", `{"default_rules":{"rules":[{"name":"a","action":"limit","limit":"5","period_s":1.5}]}}`, []string{
			`1:65: a: limit must be a whole number, got the value "5"`,
			`1:80: a: period_s must be a whole number, got the value "1.5"`,
		}},
		{"invalid rules", `{"published_rules":{"rules":[{"name":"a","action":"limit","limit":0,"period_s":60},{"name":"a","action":"skip","match":{"path":{"regex":"("}}}]}}`, []string{
			`1:67: a: limit must be at least 1, got 0`,
			`1:92: a: rule name "a" is used twice in this limiter (first at line 1)`,
			`1:128: a: match "path": invalid RE2 regex "(": error parsing regexp: missing closing ): ` + "`(`",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := UnmarshalLimiterRules([]byte(tt.data))
			if doc != nil {
				t.Errorf("got a document %v with the error", doc)
			}
			assertErrors(t, err, tt.want)
		})
	}
}

func TestMarshalLimiterRulesRejectsInvalid(t *testing.T) {
	doc := &configv1.LimiterRules{FileRules: &configv1.RuleList{Rules: []*configv1.Rule{{Name: "x", Action: configv1.Action_ACTION_LIMIT}}}}
	_, err := MarshalLimiterRules(doc)
	assertErrors(t, err, []string{`x: limit and log rules require limit and period_s`})
}

// assertErrors checks that err is a *ValidationError with exactly the lines want.
func assertErrors(t *testing.T, err error, want []string) {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error = %v (%T), want a *ValidationError", err, err)
	}
	got := strings.Split(ve.Error(), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMarshalRuleMatchesDocumentEncoding(t *testing.T) {
	doc, err := UnmarshalLimiterRules([]byte(designStored))
	if err != nil {
		t.Fatal(err)
	}
	whole, err := MarshalLimiterRules(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append(doc.GetDefaultRules().GetRules(), doc.GetPublishedRules().GetRules()...) {
		b, err := MarshalRule(r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(whole, b) {
			t.Errorf("rule %s encodes as %s, which the document %s does not contain", r.GetName(), b, whole)
		}
	}
	if _, err := MarshalRule(&configv1.Rule{Name: "Bad Name"}); err == nil {
		t.Fatal("an invalid rule was encoded")
	}
}
