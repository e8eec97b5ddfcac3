package config

import (
	"errors"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

var fuzzSeeds = []string{
	"",
	"rate_limits:\n",
	"rate_limits:\n  pipelines_create:\n    - name: a\n      action: skip\n      match: {sha: {regex: '^[0-9a-f]+$'}}\n",
	"rate_limits:\n  user_sign_in:\n    - name: a\n      action: limit\n      limit: 1\n      period_s: 1\n      ban_for_s: 5\n      characteristics: [ip]\n",
	"rate_limits:\n  user_sign_in:\n    - name: a\n      action: limit\n      limit: 1\n      period_s: 1\n      count_distinct: username\n      match: {ip: {one_of: [a, b]}}\n",
	"rate_limits:\n  rack_request: {rules: [{name: a, action: log, limit: 3, period_s: 9}]}\n",
	"rate_limits:\n  nope: [x]\n  rack_request:\n    - name: A\n      limit: -1\n      match: {path: {regex: '('}}\n",
	"rate_limits: &a\n  rack_request: [{name: a, action: skip, match: *a}]\n",
	"rate_limits:\n  rack_request:\n    - &r {name: a, action: skip}\n    - *r\n",
	"{\"rate_limits\":{\"rack_request\":[{\"name\":\"a\",\"action\":\"skip\"}]}}",
	"rate_limits:\n  rack_request:\n    - name: a\n      <<: {action: skip}\n",
	"---\n---\n",
	"rate_limits: [\n",
}

// FuzzLoadRateLimits feeds arbitrary bytes to the rate_limits.yaml loader: it
// must never panic, and must return either a valid result or a
// *ValidationError, never both. A valid result must be one the core accepts
// and the rule store can write and read back unchanged.
func FuzzLoadRateLimits(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile("testdata/rate_limits.yaml"); err == nil {
		f.Add(b)
	}
	available, err := LoadAvailableLimiters("testdata/available_limiters.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRateLimits("f.yaml", data, available)
		if (r == nil) == (err == nil) {
			t.Fatalf("result %v with error %v: want exactly one", r, err)
		}
		if err != nil {
			for _, e := range validationErrors(t, err) {
				if !strings.HasPrefix(e.Error(), "f.yaml") || e.Message == "" {
					t.Fatalf("error %q does not name the file or says nothing", e.Error())
				}
			}
			return
		}
		skips := 0
		for _, name := range r.Limiters() {
			rules, err := Rules(available, r, name)
			if err != nil {
				t.Fatalf("valid file, but the rules of %s do not convert: %v", name, err)
			}
			if _, err := ratelimit.CompileRules("", rules); err != nil {
				t.Fatalf("valid file, but the core rejects the rules of %s: %v", name, err)
			}
			list := r.Proto.GetRateLimits()[name]
			for _, rule := range list.GetRules() {
				if rule.GetAction() == configv1.Action_ACTION_SKIP {
					skips++
				}
			}
			doc := &configv1.LimiterRules{FileRules: list}
			b, err := MarshalLimiterRules(doc)
			if err != nil {
				t.Fatalf("valid file, but its rules of %s cannot be stored: %v", name, err)
			}
			back, err := UnmarshalLimiterRules(b)
			if err != nil || !proto.Equal(back, doc) {
				t.Fatalf("stored rules of %s do not read back: %v\n%s", name, err, b)
			}
		}
		if got := len(r.SkipRules()); got != skips {
			t.Fatalf("SkipRules lists %d, the file has %d", got, skips)
		}
	})
}

// FuzzUnmarshalLimiterRules: a stored document reads as valid or as an error,
// and a valid one writes back to bytes that read the same.
func FuzzUnmarshalLimiterRules(f *testing.F) {
	f.Add([]byte(designStored))
	f.Add([]byte(`{"file_rules":{"rules":[{"name":"a","action":"skip","characteristics":[],"match":{"p":{"one_of":["x"]},"q":{"regex":"^a"}}}]}}`))
	f.Add([]byte(`{"file_rules":{"rules":[{"name":"a","action":"skip"}]},"file_rules":null}`))
	f.Add([]byte(`[1, 2.5, "x", true, null, {}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := UnmarshalLimiterRules(data)
		if (doc == nil) == (err == nil) {
			t.Fatalf("document %v with error %v: want exactly one", doc, err)
		}
		if err != nil {
			validationErrors(t, err)
			return
		}
		b, err := MarshalLimiterRules(doc)
		if err != nil {
			t.Fatalf("a valid document does not marshal: %v", err)
		}
		back, err := UnmarshalLimiterRules(b)
		if err != nil || !proto.Equal(back, doc) {
			t.Fatalf("marshalled document does not read back: %v\n%s", err, b)
		}
		b2, _ := MarshalLimiterRules(back)
		if string(b2) != string(b) {
			t.Fatalf("marshal is not stable:\n%s\n%s", b, b2)
		}
	})
}

func validationErrors(t *testing.T, err error) []*Error {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) == 0 {
		t.Fatalf("error %v (%T) is not a *ValidationError with problems", err, err)
	}
	return ve.Errors
}
