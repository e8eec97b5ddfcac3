package config

import (
	"fmt"
	"strings"
	"testing"
)

// availableBase starts an available_limiters.yaml whose limiter "lim" has
// properties ip, user and path; a test appends lines from line 5 on.
const availableBase = `available_limiters:
  lim:
    description: d
    available_properties: [ip, user, path]
`

func TestParseAvailableLimitersErrors(t *testing.T) {
	long := strings.Repeat("x", 1025)
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"empty file", "", []string{`a.yaml: no limiters declared: available_limiters needs at least one`}},
		{"no limiters", "available_limiters: {}\n", []string{`a.yaml:1:21: no limiters declared: available_limiters needs at least one`}},
		{"limiter name", "available_limiters:\n  Bad-Name:\n    description: x\n",
			[]string{`a.yaml:2:3: Bad-Name: limiter name "Bad-Name" must be 1 to 64 characters, each a-z, 0-9 or _`}},
		{"description missing", "available_limiters:\n  a:\n    available_properties: [ip]\n",
			[]string{`a.yaml:3:5: a: description is missing`}},
		{"description too long", "available_limiters:\n  a:\n    description: " + long + "\n",
			[]string{`a.yaml:3:18: a: description is 1025 characters long; at most 1024 are allowed`}},
		{"properties", "available_limiters:\n  a:\n    description: d\n    available_properties: [ip, IP, ip]\n", []string{
			`a.yaml:4:27: a: available_properties lists "ip" twice`,
			`a.yaml:4:32: a: property "IP" must be 1 to 64 characters, each a-z, 0-9 or _`,
		}},
		{"unknown limiter field", availableBase + "    default_rule: []\n",
			[]string{`a.yaml:5:5: lim: unknown field "default_rule" (did you mean "default_rules"?)`}},
		{"unknown field without a near name", availableBase + "    colour: red\n",
			[]string{`a.yaml:5:5: lim: unknown field "colour"; a limiter takes allowed_skip_rules, available_properties, default_rules, description`}},
		{"duplicate field", availableBase + "    description: again\n",
			[]string{`a.yaml:5:5: lim: field "description" is given twice (first at line 3)`}},
		{"duplicate limiter", availableBase + "  lim:\n    description: again\n",
			[]string{`a.yaml:5:3: lim: limiter name "lim" is given twice (first at line 2)`}},
		{"rule without name", availableBase + "    default_rules:\n      - limit: 1\n        period_s: 1\n        action: limit\n",
			[]string{`a.yaml:6:9: lim/#1: rule name is missing`}},
		{"rule name", availableBase + "    default_rules:\n      - name: Limit-All\n        limit: 1\n        period_s: 1\n        action: limit\n",
			[]string{`a.yaml:6:15: lim/Limit-All: rule name "Limit-All" must be 1 to 64 characters, each a-z, 0-9 or _`}},
		{"rule name too long", availableBase + "    default_rules:\n      - name: " + strings.Repeat("a", 65) + "\n        action: skip\n",
			[]string{`a.yaml:6:15: lim/` + strings.Repeat("a", 65) + `: rule name "` + strings.Repeat("a", 65) + `" must be 1 to 64 characters, each a-z, 0-9 or _`}},
		{"zero thresholds", availableBase + "    default_rules:\n      - name: r\n        limit: 0\n        period_s: 0\n        ban_for_s: 0\n        action: limit\n", []string{
			`a.yaml:7:16: lim/r: limit must be at least 1, got 0`,
			`a.yaml:8:19: lim/r: period_s must be at least 1, got 0`,
			`a.yaml:9:20: lim/r: ban_for_s must be at least 1, got 0`,
		}},
		{"limit without period", availableBase + "    default_rules:\n      - name: r\n        action: log\n        limit: 5\n",
			[]string{`a.yaml:6:9: lim/r: limit and log rules require limit and period_s`}},
		{"missing action", availableBase + "    default_rules:\n      - name: r\n        limit: 1\n        period_s: 1\n",
			[]string{`a.yaml:6:9: lim/r: action is missing: it must be limit, log or skip`}},
		{"null action", availableBase + "    default_rules:\n      - name: r\n        action:\n        limit: 1\n        period_s: 1\n",
			[]string{`a.yaml:7:16: lim/r: action is missing: it must be limit, log or skip`}},
		{"unknown action", availableBase + "    default_rules:\n      - name: r\n        action: block\n",
			[]string{`a.yaml:7:17: lim/r: action must be one of limit, log, skip, got the value "block"`}},
		{"skip with ban and count_distinct", availableBase + "    default_rules:\n      - name: r\n        action: skip\n        ban_for_s: 60\n        count_distinct: user\n", []string{
			`a.yaml:6:9: lim/r: ban_for_s cannot be combined with count_distinct`,
			`a.yaml:6:9: lim/r: ban_for_s is not valid on skip rules`,
			`a.yaml:6:9: lim/r: count_distinct is not valid on skip rules`,
		}},
		{"ban with count_distinct", availableBase + "    default_rules:\n      - name: r\n        limit: 5\n        period_s: 60\n        ban_for_s: 60\n        count_distinct: user\n        action: limit\n",
			[]string{`a.yaml:6:9: lim/r: ban_for_s cannot be combined with count_distinct`}},
		{"properties not available", availableBase + "    default_rules:\n      - name: r\n        limit: 5\n        period_s: 60\n        characteristics: [ip, sha]\n        count_distinct: username\n        match:\n          plan: free\n        action: limit\n", []string{
			`a.yaml:9:31: lim/r: characteristic "sha" is not one of the limiter's available_properties (ip, user, path)`,
			`a.yaml:10:25: lim/r: count_distinct property "username" is not one of the limiter's available_properties (ip, user, path)`,
			`a.yaml:12:11: lim/r: match property "plan" is not one of the limiter's available_properties (ip, user, path)`,
		}},
		{"property names", availableBase + "    default_rules:\n      - name: r\n        limit: 5\n        period_s: 60\n        characteristics: [ip, ip, User]\n        count_distinct: User\n        match:\n          Path: /x\n        action: limit\n", []string{
			`a.yaml:9:26: lim/r: characteristics lists "ip" twice`,
			`a.yaml:9:35: lim/r: characteristic "User" must be 1 to 64 characters, each a-z, 0-9 or _`,
			`a.yaml:10:25: lim/r: count_distinct property "User" must be 1 to 64 characters, each a-z, 0-9 or _`,
			`a.yaml:12:11: lim/r: match property "Path" must be 1 to 64 characters, each a-z, 0-9 or _`,
		}},
		{"regexes", availableBase + "    default_rules:\n      - name: r\n        action: skip\n        match:\n          path: {regex: \"(\"}\n          user: {regex: \"\"}\n          ip: {regex: \"" + strings.Repeat("[a-z]{1000}", 11) + "\"}\n", []string{
			`a.yaml:9:17: lim/r: match "path": invalid RE2 regex "(": error parsing regexp: missing closing ): ` + "`(`",
			`a.yaml:10:25: lim/r: match "user": regex is missing`,
			`a.yaml:11:15: lim/r: match "ip": regex "` + strings.Repeat("[a-z]{1000}", 11) + `" compiles to 11002 instructions, the limit is 10000`,
		}},
		{"regex too long", availableBase + "    default_rules:\n      - name: r\n        action: skip\n        match:\n          path: {regex: " + strings.Repeat("a", 1025) + "}\n",
			[]string{`a.yaml:9:25: lim/r: match "path": regex is 1025 bytes long; at most 1024 are allowed`}},
		{"match values", availableBase + "    default_rules:\n      - name: r\n        action: skip\n        match:\n          path: [a, b]\n          user: {one_of: []}\n          ip: {one_of: [a, a]}\n", []string{
			`a.yaml:9:17: lim/r: a match value must be a string, {regex: ...} or {one_of: [...]}, got a list`,
			`a.yaml:10:26: lim/r: match "user": one_of needs at least 1 value`,
			`a.yaml:11:24: lim/r: match "ip": one_of lists "a" twice`,
		}},
		{"two match kinds", availableBase + "    default_rules:\n      - name: r\n        action: skip\n        match:\n          path: {regex: a, one_of: [x]}\n",
			[]string{`a.yaml:9:28: lim/r: a match value takes one of equality, regex, one_of, not both regex and one_of`}},
		{"match marker typo", availableBase + "    default_rules:\n      - name: r\n        action: skip\n        match:\n          path: {regexp: x}\n",
			[]string{`a.yaml:9:18: lim/r: unknown field "regexp" (did you mean "regex"?)`}},
		{"empty match marker", availableBase + "    default_rules:\n      - name: r\n        action: skip\n        match:\n          path: {}\n",
			[]string{`a.yaml:9:17: lim/r: match "path" has no value: give text, {regex: ...} or {one_of: [...]}`}},
		{"equality too long", availableBase + "    default_rules:\n      - name: r\n        action: skip\n        match:\n          path: " + strings.Repeat("p", 4097) + "\n",
			[]string{`a.yaml:9:17: lim/r: match "path" is 4097 bytes long; at most 4096 are allowed`}},
		{"duplicate match property", availableBase + "    default_rules:\n      - name: r\n        action: skip\n        match:\n          path: a\n          path: b\n",
			[]string{`a.yaml:10:11: lim/r: match property "path" is given twice (first at line 9)`}},
		{"duplicate rule names", availableBase + "    default_rules:\n      - name: r\n        action: skip\n      - name: r\n        action: skip\n",
			[]string{`a.yaml:8:15: lim/r: rule name "r" is used twice in this limiter (first at line 6)`}},
		{"wrong types", availableBase + "    default_rules:\n      - name: r\n        limit: ten\n        period_s: 1.5\n        ban_for_s: -1\n        characteristics: ip\n        action: limit\n      - just_a_name\n      - name: big\n        limit: 5000000000\n        period_s: 1\n        action: limit\n", []string{
			`a.yaml:7:16: lim/r: limit must be a whole number, got the value "ten"`,
			`a.yaml:8:19: lim/r: period_s must be a whole number, got the value "1.5"`,
			`a.yaml:9:20: lim/r: ban_for_s must be at least 1, got -1`,
			`a.yaml:10:26: lim/r: characteristics must be a list, got the value "ip"`,
			`a.yaml:12:9: lim/#2: a rule must be a mapping (name: value lines), got the value "just_a_name"`,
			`a.yaml:14:16: lim/big: limit must be at most 4294967295, got 5000000000`,
		}},
		{"default_rules not a list", availableBase + "    default_rules: {name: r}\n",
			[]string{`a.yaml:5:20: lim: default_rules must be a list, got a mapping`}},
		{"skip rule names", availableBase + "    allowed_skip_rules: [ok_name, Bad]\n",
			[]string{`a.yaml:5:35: lim: skip rule name "Bad" must be 1 to 64 characters, each a-z, 0-9 or _`}},
		{"skip default outside allow list", availableBase + "    allowed_skip_rules: [skip_health]\n    default_rules:\n      - name: skip_everything\n        action: skip\n",
			[]string{`a.yaml:8:17: lim/skip_everything: skip rule "skip_everything" is not in the limiter's allowed_skip_rules (skip_health); a skip bypasses the limiter for every request it matches`}},
		{"skip default with skips forbidden", availableBase + "    allowed_skip_rules: []\n    default_rules:\n      - name: skip_everything\n        action: skip\n",
			[]string{`a.yaml:8:17: lim/skip_everything: skip rules are not allowed on this limiter: its allowed_skip_rules list is empty (a skip bypasses the limiter for every request it matches)`}},
		{"syntax error", "available_limiters:\n  a: [\n", []string{`a.yaml:2:3: invalid YAML: did not find expected node content`}},
		{"tab indentation", "available_limiters:\n\ta: {}\n", []string{`a.yaml:2:1: invalid YAML: found character that cannot start any token (a tab in the indentation: YAML indents with spaces only; replace it with spaces)`}},
		{"two documents", availableBase + "---\navailable_limiters: {}\n",
			[]string{`a.yaml:5:1: invalid YAML: the file holds a second YAML document (after ---); put everything in one`}},
		{"merge keys", "base: &b {description: d}\navailable_limiters:\n  a:\n    <<: *b\n", []string{
			`a.yaml:1:1: unknown field "base"; the document takes available_limiters`,
			`a.yaml:4:5: a: YAML merge keys (<<) and keys that are not plain names are not supported`,
		}},
		{"top-level list", "- a\n", []string{`a.yaml:1:1: the document must be a mapping (name: value lines), got a list`}},
		{"alias bomb", aliasBomb(), []string{`a.yaml:4:2681: the document is too large: over 200000 YAML nodes once aliases are expanded`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseAvailableLimiters("a.yaml", []byte(tt.yaml))
			if a != nil {
				t.Errorf("got a result with the error: %v", a.Proto)
			}
			assertErrors(t, err, tt.want)
		})
	}
}

// aliasBomb is a small file that expands, through aliases, to 500 rules of
// 500 characteristics each.
func aliasBomb() string {
	props := make([]string, 500)
	for i := range props {
		props[i] = fmt.Sprintf("p%d", i)
	}
	rules := strings.Repeat(", *r", 499)
	return "available_limiters:\n  lim:\n    description: d\n    available_properties: &c [" + strings.Join(props, ", ") + "]\n" +
		"    default_rules: [&r {name: r, action: skip, characteristics: *c}" + rules + "]\n"
}
