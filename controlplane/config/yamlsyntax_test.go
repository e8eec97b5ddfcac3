package config

import (
	"strings"
	"testing"
)

// A YAML syntax error is reported at the line and column of the real
// problem, not where the parser's enclosing block starts; a tab is named.
func TestSyntaxErrorPlace(t *testing.T) {
	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"one space too few", "rate_limits:\n  http_request:\n    - name: a\n      limit: 5\n      period_s: 60\n     action: limit\n",
			"r.yaml:6:6: invalid YAML: did not find expected '-' indicator (check the indentation of this line (5 spaces) against the lines above)"},
		{"too deep after a scalar", "rate_limits:\n  http_request:\n    - name: a\n      limit: 5\n      period_s: 60\n        action: limit\n",
			"r.yaml:6:9: invalid YAML: mapping values are not allowed in this context"},
		{"a tab", "rate_limits:\n  http_request:\n    - name: a\n      limit: 5\n\tperiod_s: 60\n      action: limit\n",
			"r.yaml:5:1: invalid YAML: found a tab character that violates indentation (a tab in the indentation: YAML indents with spaces only; replace it with spaces)"},
		{"top-level key one space in", "rate_limits:\n  lim:\n    - name: a\n      action: skip\n x: 1\n",
			"r.yaml:5:2: invalid YAML:"},
		// The parser's reader names no line for these.
		{"invalid UTF-8", "rate_limits:\n  lim:\n    - name: a\n      description: caf\xe9 \xff\n",
			"r.yaml:4:23: invalid YAML: invalid trailing UTF-8 octet (byte 0xe9; the file must be UTF-8 text)"},
		{"a truncated character", "rate_limits:\n  lim:\n    - name: \xc3",
			"r.yaml:3:13: invalid YAML: incomplete UTF-8 octet sequence (byte 0xc3; the file must be UTF-8 text)"},
		{"a control character", "rate_limits:\n  lim:\n    - name: \"é\x01\"\n",
			"r.yaml:3:15: invalid YAML: control characters are not allowed (U+0001; the file must be UTF-8 text)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePublishRulesRequest("r.yaml", []byte(tt.yaml), nil)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error:\n%v\nwant a prefix of:\n%s", err, tt.want)
			}
		})
	}
}
