package rulestore

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// trickyStrings are values that a structural JSON scanner could trip on.
var trickyStrings = []string{
	`plain`, `with "quotes"`, `back\slash`, `brackets ] } [ {`, `tab	and
newline`, "line\u2028separator", `<anonymous>`, `ünïcödé 日本語`, `\"escaped\"`, `a,b:c`, "\x01control",
}

// randomRule draws a valid rule with every optional field now and then.
func randomRule(rng *rand.Rand, name string) *configv1.Rule {
	s := func() string { return trickyStrings[rng.IntN(len(trickyStrings))] }
	r := &configv1.Rule{Name: name, Action: configv1.Action_ACTION_LIMIT, Limit: ptr(uint32(1 + rng.IntN(1000))), PeriodS: ptr(uint32(1 + rng.IntN(3600)))}
	if rng.IntN(2) == 0 {
		r.Description = s()
	}
	if rng.IntN(2) == 0 {
		r.Characteristics = []string{"user", "ip"}[:1+rng.IntN(2)]
	}
	switch rng.IntN(4) {
	case 0:
		r.Action = configv1.Action_ACTION_LOG
	case 1:
		r.BanForS = ptr(uint32(60))
	case 2:
		r.CountDistinct = "scope"
	}
	if rng.IntN(2) == 0 {
		r.Match = map[string]*configv1.MatchValue{
			"scope": {Kind: &configv1.MatchValue_Equality{Equality: s()}},
			"path":  {Kind: &configv1.MatchValue_Regex{Regex: `^/api/v\d+/\{id\}`}},
			"ip":    {Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: []string{s(), "::1"}}}},
		}
	}
	return r
}

// The server-side splice gives, after every edit, exactly the bytes that
// decoding the document, editing it in Go and re-encoding it with
// config.MarshalLimiterRules give.
func TestSpliceMatchesGoEncoding(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{})
		rng := rand.New(rand.NewPCG(1, 2))
		var model *configv1.LimiterRules // nil: no document
		names := []string{"a", "b", "c", "d", "e"}
		for step := range 200 {
			var err error
			var what string
			switch op := rng.IntN(3); op {
			case 0: // publish 1..3 rules
				var rules []*configv1.Rule
				for _, n := range names[:1+rng.IntN(3)] {
					if rng.IntN(2) == 0 {
						rules = append(rules, randomRule(rng, names[rng.IntN(len(names))]+"_p"))
					} else {
						rules = append(rules, randomRule(rng, n+"_p"))
					}
				}
				rules = uniqueByName(rules)
				what = fmt.Sprintf("publish %v", protoNames(&configv1.RuleList{Rules: rules}))
				_, err = s.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"lim": {Rules: rules}}})
				if err == nil && len(rules) > 0 {
					model = modelPublish(model, rules)
				}
			case 1: // seed
				file := uniqueByName([]*configv1.Rule{randomRule(rng, "f1"), randomRule(rng, "a_p")})[:rng.IntN(3)]
				defaults := uniqueByName([]*configv1.Rule{randomRule(rng, "d1"), randomRule(rng, "d2")})[:rng.IntN(3)]
				what = fmt.Sprintf("seed %d file, %d defaults", len(file), len(defaults))
				err = seedProto(s, "lim", file, defaults)
				if err == nil && (model != nil || len(file)+len(defaults) > 0) {
					if model == nil {
						model = &configv1.LimiterRules{}
					}
					model.FileRules = &configv1.RuleList{Rules: file}
					model.DefaultRules = &configv1.RuleList{Rules: defaults}
				}
			case 2: // delete one published rule (or a missing one)
				pub := protoNames(model.GetPublishedRules())
				name := "missing"
				if len(pub) > 0 && rng.IntN(4) > 0 {
					name = pub[rng.IntN(len(pub))]
				}
				what = "delete " + name
				_, err = s.Delete(ctx, "lim", name)
				if name == "missing" {
					if !isNotFound(err) {
						t.Fatalf("step %d: delete missing: %v", step, err)
					}
					err = nil
				} else if err == nil {
					model = modelDelete(model, name)
				}
			}
			if err != nil {
				t.Fatalf("step %d (%s): %v", step, what, err)
			}
			got, ok := raw(t, c, s.Key("lim"))
			if model == nil {
				if ok {
					t.Fatalf("step %d (%s): document %s, want none", step, what, got)
				}
				continue
			}
			want, err := config.MarshalLimiterRules(model)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Fatalf("step %d (%s):\n got %s\nwant %s", step, what, got, want)
			}
		}
	})
}

func seedProto(s *Store, limiter string, file, defaults []*configv1.Rule) error {
	f, err1 := config.RulesFromProto(&configv1.RuleList{Rules: file})
	d, err2 := config.RulesFromProto(&configv1.RuleList{Rules: defaults})
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	_, err := s.Seed(ctx, map[string]tiers.Set{limiter: {File: f, Defaults: d}})
	return err
}

func uniqueByName(rules []*configv1.Rule) []*configv1.Rule {
	var out []*configv1.Rule
	for _, r := range rules {
		if !slices.ContainsFunc(out, func(o *configv1.Rule) bool { return o.GetName() == r.GetName() }) {
			out = append(out, r)
		}
	}
	return out
}

// modelPublish is the specification of a publish: upsert by name.
func modelPublish(doc *configv1.LimiterRules, rules []*configv1.Rule) *configv1.LimiterRules {
	if doc == nil {
		doc = &configv1.LimiterRules{}
	}
	if doc.PublishedRules == nil {
		doc.PublishedRules = &configv1.RuleList{}
	}
	for _, r := range rules {
		i := slices.IndexFunc(doc.PublishedRules.Rules, func(o *configv1.Rule) bool { return o.GetName() == r.GetName() })
		if i >= 0 {
			doc.PublishedRules.Rules[i] = proto.CloneOf(r)
		} else {
			doc.PublishedRules.Rules = append(doc.PublishedRules.Rules, proto.CloneOf(r))
		}
	}
	return doc
}

func modelDelete(doc *configv1.LimiterRules, name string) *configv1.LimiterRules {
	doc.PublishedRules.Rules = slices.DeleteFunc(doc.PublishedRules.Rules, func(o *configv1.Rule) bool { return o.GetName() == name })
	if len(doc.PublishedRules.Rules) == 0 {
		doc.PublishedRules = nil
	}
	if doc.FileRules == nil && doc.DefaultRules == nil && doc.PublishedRules == nil {
		return nil
	}
	return doc
}

// A document another SDK wrote in the same shape but its own spelling
// (whitespace, field order, escapes) is edited in place: the rules a publish
// does not touch keep their bytes, and the result reads back as expected.
func TestSplicePreservesForeignRules(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{})
		foreignRule := `{ "match" : {"path": {"regex": "^/a\\{\"}"}}, "name": "foreign", "action": "log",
		  "limit": 5, "period_s": 60, "characteristics": [ "ip" ], "description": "caf\u00e9 ] }" }`
		doc := "{\n  \"published_rules\": {\"rules\": [" + foreignRule + "]},\n  \"default_rules\" : { \"rules\" : [ ] }\n}"
		if err := c.Set(ctx, s.Key("lim"), doc, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Document(ctx, "lim"); err != nil {
			t.Fatalf("the foreign document is not valid to begin with: %v", err)
		}
		if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"lim": {rule("mine", 3)}})); err != nil {
			t.Fatal(err)
		}
		got, _ := raw(t, c, s.Key("lim"))
		mine := `{"name":"mine","limit":3,"period_s":60,"action":"limit","characteristics":["user"],"match":{}}`
		want := `{"default_rules":{"rules":[]},"published_rules":{"rules":[` + foreignRule + `,` + mine + `]}}`
		if got != want {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
		d, err := s.Document(ctx, "lim")
		if err != nil {
			t.Fatal(err)
		}
		if names := protoNames(d.PublishedRules); !slices.Equal(names, []string{"foreign", "mine"}) || d.PublishedRules.Rules[0].GetDescription() != "café ] }" {
			t.Fatalf("read back %v %q", names, d.PublishedRules.Rules[0].GetDescription())
		}
	})
}

// A stored document the scanner cannot read stops the write, whichever check
// sees it first, and the error names the key.
func TestUnreadableDocumentStopsTheWrite(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{})
		for _, bad := range []string{`not json`, `{"published_rules":{"rules":[{"name":"x"`, `{"extra":{}}`, `[]`, `{"published_rules":{"rules":[{"limit":1}]}}`} {
			if err := c.Set(ctx, s.Key("lim"), bad, 0).Err(); err != nil {
				t.Fatal(err)
			}
			_, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"lim": {rule("mine", 3)}}))
			if err == nil || !strings.Contains(err.Error(), s.Key("lim")) {
				t.Fatalf("%s: err = %v", bad, err)
			}
			if got, _ := raw(t, c, s.Key("lim")); got != bad {
				t.Fatalf("%s: overwritten with %s", bad, got)
			}
			// The script's own scan refuses it too (Publish checks first).
			plan, _ := json.Marshal([]edit{{Limiter: "lim", Op: "publish", Rules: [][2]string{{"mine", "{}"}}}})
			res, err := writeScript.Run(ctx, c, []string{s.indexKey(), s.revKey(), s.Key("lim")}, plan, ratelimit.MaxRulesPerTier, ratelimit.MaxDocumentBytes, MaxLimiters, "0").Slice()
			if err != nil {
				t.Fatal(err)
			}
			if code, _ := res[0].(int64); code != -1 {
				t.Fatalf("%s: script replied %v, want -1", bad, res)
			}
		}
	})
}
