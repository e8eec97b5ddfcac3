package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// guardedAvailable declares three limiters with the three kinds of skip
// guardrail: none, an allow list, and no skip rules at all.
const guardedAvailable = `available_limiters:
  open:
    description: no skip restriction
    available_properties: [ip, user, path]
  guarded:
    description: skip rules restricted
    available_properties: [ip, path]
    allowed_skip_rules: [skip_health]
  locked:
    description: no skip rules at all
    available_properties: [ip]
    allowed_skip_rules: []
`

func mustAvailable(t testing.TB, yaml string) *AvailableLimiters {
	t.Helper()
	a, err := ParseAvailableLimiters("available_limiters.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestParseRateLimitsErrors(t *testing.T) {
	available := mustAvailable(t, guardedAvailable)
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"top-level typo", "rate_limit: {}\n", []string{`r.yaml:1:1: unknown field "rate_limit" (did you mean "rate_limits"?)`}},
		{"undeclared limiter", "rate_limits:\n  missing:\n    - name: a\n      action: skip\n",
			[]string{`r.yaml:2:3: missing: no limiter "missing" in available_limiters.yaml (it declares guarded, locked, open)`}},
		{"misspelt limiter", "rate_limits:\n  guardd:\n    - name: a\n      action: skip\n",
			[]string{`r.yaml:2:3: guardd: no limiter "guardd" in available_limiters.yaml (it declares guarded, locked, open); did you mean "guarded"?`}},
		{"invalid limiter name", "rate_limits:\n  No-Pe: []\n",
			[]string{`r.yaml:2:3: No-Pe: limiter name "No-Pe" must be 1 to 64 characters, each a-z, 0-9 or _`}},
		{"rules not a list", "rate_limits:\n  open:\n    name: a\n",
			[]string{`r.yaml:3:5: open: the rules of limiter open must be a list, got a mapping`}},
		{"rule not a mapping", "rate_limits:\n  open:\n    - just_a_name\n",
			[]string{`r.yaml:3:7: open/#1: a rule must be a mapping (name: value lines), got the value "just_a_name"`}},
		{"skip outside the allow list", "rate_limits:\n  guarded:\n    - name: skip_everything\n      action: skip\n",
			[]string{`r.yaml:4:15: guarded/skip_everything: skip rule "skip_everything" is not in the limiter's allowed_skip_rules (skip_health); a skip bypasses the limiter for every request it matches`}},
		{"skip on a limiter that forbids them", "rate_limits:\n  locked:\n    - name: skip_health\n      action: skip\n",
			[]string{`r.yaml:4:15: locked/skip_health: skip rules are not allowed on this limiter: its allowed_skip_rules list is empty (a skip bypasses the limiter for every request it matches)`}},
		{"properties of another limiter", "rate_limits:\n  guarded:\n    - name: a\n      limit: 1\n      period_s: 1\n      characteristics: [user]\n      match: {user: x}\n      action: limit\n", []string{
			`r.yaml:6:25: guarded/a: characteristic "user" is not one of the limiter's available_properties (ip, path)`,
			`r.yaml:7:15: guarded/a: match property "user" is not one of the limiter's available_properties (ip, path)`,
		}},
		{"duplicate names", "rate_limits:\n  open:\n    - name: a\n      action: skip\n    - name: a\n      action: skip\n",
			[]string{`r.yaml:5:13: open/a: rule name "a" is used twice in this limiter (first at line 3)`}},
		{"count_missing without characteristics", "rate_limits:\n  open:\n    - name: a\n      limit: 1\n      period_s: 1\n      count_missing: true\n      action: limit\n",
			[]string{`r.yaml:3:7: open/a: count_missing needs characteristics and is not valid on skip rules`}},
		{"count_missing is a boolean", "rate_limits:\n  open:\n    - name: a\n      limit: 1\n      period_s: 1\n      characteristics: [user]\n      count_missing: yes\n      action: limit\n",
			[]string{`r.yaml:7:22: open/a: count_missing must be true or false, got the value "yes"`}},
		{"a rule without action", "rate_limits:\n  open:\n    - name: a\n      characteristics: [ip]\n",
			[]string{`r.yaml:3:7: open/a: limit and log rules require limit and period_s`, `r.yaml:3:7: open/a: action is missing: it must be limit, log or skip`}},
		{"count_distinct with a sliding window", "rate_limits:\n  open:\n    - name: a\n      limit: 1\n      period_s: 1\n      characteristics: [user]\n      count_distinct: ip\n      algorithm: sliding_window\n      action: limit\n",
			[]string{`r.yaml:3:7: open/a: count_distinct counts in fixed windows only`}},
		{"burst without a token bucket", "rate_limits:\n  open:\n    - name: a\n      limit: 1\n      period_s: 1\n      algorithm: sliding_window\n      burst: 5\n      action: limit\n",
			[]string{`r.yaml:3:7: open/a: burst is valid with algorithm token_bucket only`}},
		{"algorithm on a skip rule", "rate_limits:\n  open:\n    - name: a\n      algorithm: token_bucket\n      action: skip\n",
			[]string{`r.yaml:3:7: open/a: algorithm and burst are not valid on skip rules`}},
		{"unknown algorithm", "rate_limits:\n  open:\n    - name: a\n      limit: 1\n      period_s: 1\n      algorithm: leaky_bucket\n      action: limit\n",
			[]string{`r.yaml:6:18: open/a: algorithm must be one of fixed_window, sliding_window, token_bucket, got the value "leaky_bucket"`}},
		{"burst of 0", "rate_limits:\n  open:\n    - name: a\n      limit: 1\n      period_s: 1\n      algorithm: token_bucket\n      burst: 0\n      action: limit\n",
			[]string{`r.yaml:7:14: open/a: burst must be at least 1, got 0`}},
		{"every error of the file, in file order", "rate_limits:\n  open:\n    - name: a\n      limit: 0\n      period_s: 60\n      colour: red\n      action: limit\n  missing: []\n  guarded:\n    - name: b\n      action: skip\n      ban_for_s: 10\n", []string{
			`r.yaml:4:14: open/a: limit must be at least 1, got 0`,
			`r.yaml:6:7: open/a: unknown field "colour"; a rule takes action, algorithm, ban_for_s, burst, characteristics, count_distinct, count_missing, description, limit, match, name, period_s`,
			`r.yaml:8:3: missing: no limiter "missing" in available_limiters.yaml (it declares guarded, locked, open)`,
			`r.yaml:10:7: guarded/b: ban_for_s is not valid on skip rules`,
			`r.yaml:11:15: guarded/b: skip rule "b" is not in the limiter's allowed_skip_rules (skip_health); a skip bypasses the limiter for every request it matches`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRateLimits("r.yaml", []byte(tt.yaml), available)
			if r != nil {
				t.Errorf("got a result with the error: %v", r.Proto)
			}
			assertErrors(t, err, tt.want)
		})
	}
}

// TestDesignExampleWithoutActionFails: the design's own rate_limits.yaml
// example (the one docs/design.md is drawn from) leaves `action` out of one rule. The schema requires it (a shadow
// rule that forgot `action: log` would enforce), so the file is rejected,
// naming the rule and the values it may take.
func TestDesignExampleWithoutActionFails(t *testing.T) {
	available, err := LoadAvailableLimiters("testdata/available_limiters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = LoadRateLimits("testdata/design_rate_limits.yaml", available)
	assertErrors(t, err, []string{
		`testdata/design_rate_limits.yaml:32:7: user_sign_in/user_sign_in_distinct_users_per_ip: action is missing: it must be limit, log or skip`,
	})
}

func TestDesignExamplesAreValid(t *testing.T) {
	available, err := LoadAvailableLimiters("testdata/available_limiters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := available.Names(), []string{"pipelines_create", "rack_request", "user_sign_in"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("limiters = %v, want %v", got, want)
	}
	rateLimits, err := LoadRateLimits("testdata/rate_limits.yaml", available)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rateLimits.Limiters(), []string{"pipelines_create", "user_sign_in"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("rate_limits limiters = %v, want %v", got, want)
	}

	set, err := Tiers(available, rateLimits, "user_sign_in")
	if err != nil {
		t.Fatal(err)
	}
	file, defaults := set.File, set.Defaults
	wantDefaults := []ratelimit.Rule{{
		Name:            "limit_user_sign_ins_by_username",
		Characteristics: []string{"username"},
		Limit:           5,
		Period:          10 * time.Minute,
		Action:          ratelimit.ActionLimit,
		BanFor:          15 * time.Minute,
	}}
	if !reflect.DeepEqual(defaults, wantDefaults) {
		t.Errorf("defaults = %+v\nwant %+v", defaults, wantDefaults)
	}
	wantFile := []ratelimit.Rule{{
		Name:            "user_sign_in_distinct_users_per_ip",
		Description:     "distinct users attempting to sign in from a single IP",
		Characteristics: []string{"ip"},
		Limit:           10,
		Period:          time.Hour,
		Action:          ratelimit.ActionLimit,
		CountDistinct:   "username",
	}, {
		Name:            "user_sign_in_ban_ip_after_failures",
		Description:     "ban an IP for 15 minutes after 10 failed sign-ins in a minute",
		Characteristics: []string{"ip"},
		Limit:           10,
		Period:          time.Minute,
		Action:          ratelimit.ActionLimit,
		BanFor:          15 * time.Minute,
	}}
	if !reflect.DeepEqual(file, wantFile) {
		t.Errorf("file rules = %+v\nwant %+v", file, wantFile)
	}

	rack, err := Rules(available, rateLimits, "rack_request")
	if err != nil {
		t.Fatal(err)
	}
	if len(rack) != 2 || rack[0].Match["path"].String() != `"/users/sign_in"` || len(rack[1].Match) != 0 {
		t.Errorf("rack_request rules = %+v", rack)
	}

	// Every limiter's merged list is one the core accepts.
	for _, name := range available.Names() {
		rules, err := Rules(available, rateLimits, name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ratelimit.CompileRules("", rules); err != nil {
			t.Errorf("%s: the core rejects the loaded rules: %v", name, err)
		}
	}

	skips := rateLimits.SkipRules()
	if len(skips) != 1 || skips[0].Limiter != "pipelines_create" || skips[0].Rule.GetName() != "pipelines_create_skip_app_defaults" ||
		skips[0].Line != 27 || skips[0].Column != 7 || skips[0].File != "testdata/rate_limits.yaml" {
		t.Errorf("skip rules = %+v", skips)
	}
	if s := available.SkipRules(); len(s) != 0 {
		t.Errorf("default skip rules = %+v, want none", s)
	}
}

func TestValidDocuments(t *testing.T) {
	available := mustAvailable(t, guardedAvailable)
	tests := []struct {
		name, yaml string
		limiter    string
		want       []ratelimit.Rule
	}{
		{"empty file", "", "open", nil},
		{"comments only", "# nothing yet\n", "open", nil},
		{"null rate_limits", "rate_limits:\n", "open", nil},
		{"allowed skip", "rate_limits:\n  guarded:\n    - name: skip_health\n      action: skip\n      match: {path: {one_of: [/-/health, /-/ready]}}\n", "guarded",
			[]ratelimit.Rule{{Name: "skip_health", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"path": ratelimit.OneOf("/-/health", "/-/ready")}}}},
		{"scalars are canonical text", "rate_limits:\n  open:\n    - name: a\n      action: skip\n      match: {user: 42, ip: 2024-01-31, path: true}\n    - name: b\n      action: skip\n      match: {user: 1.50}\n", "open",
			[]ratelimit.Rule{{Name: "a", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{
				"user": ratelimit.Equal("42"), "ip": ratelimit.Equal("2024-01-31"), "path": ratelimit.Equal("true")}},
				{Name: "b", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"user": ratelimit.Equal("1.5")}}}},
		{"aliases", "rate_limits:\n  open:\n    - name: a\n      action: log\n      limit: &n 5\n      period_s: *n\n      match: &m {path: {regex: '^/api/'}}\n    - name: b\n      action: skip\n      match: *m\n", "open",
			[]ratelimit.Rule{
				{Name: "a", Action: ratelimit.ActionLog, Limit: 5, Period: 5 * time.Second, Match: map[string]ratelimit.Matcher{"path": ratelimit.Regex("^/api/")}},
				{Name: "b", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"path": ratelimit.Regex("^/api/")}},
			}},
		{"count_missing opts into one bucket for callers without the property", "rate_limits:\n  open:\n    - name: per_user\n      action: limit\n      limit: 10\n      period_s: 60\n      characteristics: [user]\n      count_missing: true\n", "open",
			[]ratelimit.Rule{{Name: "per_user", Action: ratelimit.ActionLimit, Limit: 10, Period: time.Minute, Characteristics: []string{"user"}, CountMissing: true}}},
		{"the stored envelope is accepted too", "rate_limits:\n  open: {rules: [{name: a, action: skip}]}\n", "open",
			[]ratelimit.Rule{{Name: "a", Action: ratelimit.ActionSkip}}},
		{"JSON is YAML", `{"rate_limits":{"open":[{"name":"a","action":"skip","match":{"user":{"regex":"^bot"}}}]}}`, "open",
			[]ratelimit.Rule{{Name: "a", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"user": ratelimit.Regex("^bot")}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRateLimits("r.yaml", []byte(tt.yaml), available)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Rules(tt.limiter)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("rules = %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	_, err := LoadAvailableLimiters(filepath.Join(dir, "available_limiters.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing available_limiters.yaml: err = %v, want fs.ErrNotExist", err)
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		t.Fatalf("a missing file is not a validation error: %v", err)
	}

	available := mustAvailable(t, guardedAvailable)
	r, err := LoadRateLimits(filepath.Join(dir, "rate_limits.yaml"), available)
	if err != nil {
		t.Fatalf("missing rate_limits.yaml is normal, got %v", err)
	}
	if len(r.Limiters()) != 0 {
		t.Fatalf("missing rate_limits.yaml gave limiters %v", r.Limiters())
	}

	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRateLimits(big, available); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized file: err = %v", err)
	}
	if _, err := ParseRateLimits("r.yaml", nil, nil); err == nil {
		t.Fatal("ParseRateLimits without available limiters succeeded")
	}
	if _, err := available.DefaultRules("nope"); err == nil {
		t.Fatal("DefaultRules of an undeclared limiter succeeded")
	}
}

// An invalid rate_limits.yaml never half-applies: the load fails whole, and the
// limiter keeps the last good rules it was given.
func TestInvalidRateLimitsKeepLastGoodRules(t *testing.T) {
	available := mustAvailable(t, guardedAvailable)
	path := filepath.Join(t.TempDir(), "rate_limits.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// apply is what a service does on start-up and on every reload.
	apply := func(l *ratelimit.Limiter) error {
		rl, err := LoadRateLimits(path, available)
		if err != nil {
			return err // logged by the caller; the limiter is untouched
		}
		rules, err := Rules(available, rl, l.Name())
		if err != nil {
			return err
		}
		return l.SetRules(rules)
	}

	write("rate_limits:\n  open:\n    - name: per_ip\n      limit: 2\n      period_s: 60\n      characteristics: [ip]\n      action: limit\n")
	l, err := ratelimit.New(ratelimit.Config{Name: "open", Store: ratelimit.NewMemoryStore()})
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(l); err != nil {
		t.Fatal(err)
	}
	good := l.Rules()
	ctx := t.Context()
	id := ratelimit.Identifier{"ip": "192.0.2.1"}
	for i, want := range []ratelimit.Verdict{ratelimit.ActionAllow, ratelimit.ActionAllow, ratelimit.ActionBlock} {
		if got := l.Check(ctx, id).Action; got != want {
			t.Fatalf("check %d = %v, want %v", i+1, got, want)
		}
	}

	// One good rule (a higher limit) and one bad one: nothing of it applies.
	write("rate_limits:\n  open:\n    - name: per_ip\n      limit: 100\n      period_s: 60\n      characteristics: [ip]\n      action: limit\n    - name: broken\n      limit: ten\n      action: limit\n")
	err = apply(l)
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || ve.Errors[0].Rule != "broken" || ve.Errors[0].Line != 9 {
		t.Fatalf("invalid file: err = %v, want a *ValidationError for rule broken at line 9", err)
	}
	if !reflect.DeepEqual(l.Rules(), good) {
		t.Fatalf("rules changed after an invalid file: %+v", l.Rules())
	}
	if got := l.Check(ctx, id).Action; got != ratelimit.ActionBlock {
		t.Fatalf("after the invalid file the old limit of 2 should still block, got %v", got)
	}

	// SetRules itself rejects an invalid list whole, too.
	if err := l.SetRules([]ratelimit.Rule{{Name: "ok", Action: ratelimit.ActionSkip}, {Name: "Bad Name"}}); err == nil {
		t.Fatal("SetRules accepted an invalid list")
	}
	if !reflect.DeepEqual(l.Rules(), good) {
		t.Fatal("SetRules half-applied an invalid list")
	}

	// A fixed file applies.
	write("rate_limits:\n  open:\n    - name: per_ip\n      limit: 100\n      period_s: 60\n      characteristics: [ip]\n      action: limit\n")
	if err := apply(l); err != nil {
		t.Fatal(err)
	}
	if got := l.Check(ctx, id).Action; got != ratelimit.ActionAllow {
		t.Fatalf("after the fixed file (limit 100, same counter) = %v, want allow", got)
	}
}

func TestPublishRulesRequest(t *testing.T) {
	available := mustAvailable(t, guardedAvailable)
	req, err := ParsePublishRulesRequest("publish.yaml", []byte("rate_limits:\n  open:\n    - name: a\n      limit: 25\n      period_s: 60\n      characteristics: [user]\n      action: limit\n"), available)
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidatePublishRulesRequest(req, available); err != nil {
		t.Fatal(err)
	}
	bad := &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{
		"locked": {Rules: []*configv1.Rule{{Name: "skip_all", Action: configv1.Action_ACTION_SKIP}, {Name: "x", Action: configv1.Action_ACTION_LIMIT, Characteristics: []string{"user"}}}},
		"gone":   {},
		"Bad":    {},
	}}
	err = ValidatePublishRulesRequest(bad, available)
	assertErrors(t, err, []string{
		`Bad: limiter name "Bad" must be 1 to 64 characters, each a-z, 0-9 or _`,
		`gone: no limiter "gone" in available_limiters.yaml (it declares guarded, locked, open)`,
		`locked/skip_all: skip rules are not allowed on this limiter: its allowed_skip_rules list is empty (a skip bypasses the limiter for every request it matches)`,
		`locked/x: limit and log rules require limit and period_s`,
		`locked/x: characteristic "user" is not one of the limiter's available_properties (ip)`,
	})
	if err := ValidatePublishRulesRequest(bad, nil); err == nil {
		t.Fatal("without available limiters the schema checks still apply")
	}
	_, err = ParsePublishRulesRequest("publish.yaml", []byte("rate_limits:\n  missing: []\n"), available)
	assertErrors(t, err, []string{`publish.yaml:2:3: missing: no limiter "missing" in available_limiters.yaml (it declares guarded, locked, open)`})
}

// TestAllowedSkipRulesNull: an allowed_skip_rules key without a value (its
// items commented out, or ~) is refused at its line. A null value read as an
// absent key, which allows any skip rule: the guardrail was off where the
// file meant to tighten it. [] allows none; leaving the key out, any.
func TestAllowedSkipRulesNull(t *testing.T) {
	const head = "available_limiters:\n  api:\n    description: HTTP requests\n    available_properties: [ip]\n"
	tests := []struct {
		name, value string
		wantErr     string // "" when valid
		wantAllow   []string
	}{
		{"items commented out", "allowed_skip_rules:\n      # - skip_health_checks\n",
			`available_limiters.yaml:5:5: api: allowed_skip_rules has no value: write [] to allow no skip rule, or leave the key out to allow any`, nil},
		{"tilde", "allowed_skip_rules: ~\n",
			`available_limiters.yaml:5:5: api: allowed_skip_rules has no value: write [] to allow no skip rule, or leave the key out to allow any`, nil},
		{"null", "allowed_skip_rules: null\n",
			`available_limiters.yaml:5:5: api: allowed_skip_rules has no value: write [] to allow no skip rule, or leave the key out to allow any`, nil},
		{"empty list", "allowed_skip_rules: []\n", "", []string{}},
		{"a name", "allowed_skip_rules: [skip_health_checks]\n", "", []string{"skip_health_checks"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseAvailableLimiters("available_limiters.yaml", []byte(head+"    "+tt.value))
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			allow := a.Spec("api").GetAllowedSkipRules()
			if allow == nil || !reflect.DeepEqual(append([]string{}, allow.GetNames()...), tt.wantAllow) {
				t.Fatalf("allowed_skip_rules %v, want %v", allow, tt.wantAllow)
			}
		})
	}
}

// TestMatchNull: a rule's match key without a value (its entries commented
// out, or ~) is refused at its line, in rate_limits.yaml and in a default
// rule. A null read as an absent match, which matches every request: a skip
// rule whose match was commented out skipped the whole limiter. {} still
// matches every request on purpose.
func TestMatchNull(t *testing.T) {
	const available = "available_limiters:\n  api:\n    description: HTTP requests\n    available_properties: [ip]\n    default_rules:\n      - name: per_ip\n        characteristics: [ip]\n        limit: 10\n        period_s: 60\n        action: limit\n"
	const want = "match has no value: write {} to match every request, or leave the key out"
	tests := []struct {
		name, match, wantErr string // wantErr: "" when valid
	}{
		{"entries commented out", "match:\n        # ip: 10.0.0.1\n", "rate_limits.yaml:7:7: api/trusted: " + want},
		{"tilde", "match: ~\n", "rate_limits.yaml:7:7: api/trusted: " + want},
		{"null", "match: null\n", "rate_limits.yaml:7:7: api/trusted: " + want},
		{"empty mapping", "match: {}\n", ""},
		{"an entry", "match: {ip: 10.0.0.1}\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseAvailableLimiters("available_limiters.yaml", []byte(available))
			if err != nil {
				t.Fatal(err)
			}
			doc := "rate_limits:\n  api:\n    - name: trusted\n      limit: 5\n      period_s: 60\n      action: limit\n      " + tt.match
			_, err = ParseRateLimits("rate_limits.yaml", []byte(doc), a)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Fatalf("error %v, want %s", err, tt.wantErr)
			}
		})
	}
	_, err := ParseAvailableLimiters("available_limiters.yaml", []byte(available+"        match: ~\n"))
	if err == nil || !strings.Contains(err.Error(), "available_limiters.yaml:11:9:") || !strings.Contains(err.Error(), want) {
		t.Fatalf("a default rule's null match: error %v, want one at 11:9 saying %q", err, want)
	}
}

// Rules evaluates the default tier's exemptions (the skip rules opening
// default_rules) before the file rules, as the limiter does, so that an
// incident rule of rate_limits.yaml matching every request never counts a
// health check; the other default rules come after the file's.
func TestRulesDefaultExemptionsFirst(t *testing.T) {
	available, err := ParseAvailableLimiters("available_limiters.yaml", []byte(`available_limiters:
  rack_request:
    description: "every request"
    available_properties: [ip, path]
    default_rules:
      - name: skip_health_checks
        action: skip
        match:
          path: {one_of: [/-/health]}
      - name: by_ip
        action: limit
        characteristics: [ip]
        limit: 100
        period_s: 60
`))
	if err != nil {
		t.Fatal(err)
	}
	rateLimits, err := ParseRateLimits("rate_limits.yaml", []byte(`rate_limits:
  rack_request:
    - name: incident
      action: limit
      characteristics: [ip]
      limit: 5
      period_s: 60
`), available)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Rules(available, rateLimits, "rack_request")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rules {
		got = append(got, r.Name)
	}
	if want := []string{"skip_health_checks", "incident", "by_ip"}; !slices.Equal(got, want) {
		t.Fatalf("Rules = %v, want %v", got, want)
	}
}
