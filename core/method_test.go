package ratelimit_test

import (
	"context"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// TestHeadMatchesGetRules: servers answer HEAD with the GET handler, so a
// method match that accepts GET applies to HEAD too, on the hot path and in
// MatchFailures (what explain shows); one that accepts HEAD, or not GET, or a
// property other than method, is unchanged.
func TestHeadMatchesGetRules(t *testing.T) {
	tests := []struct {
		name    string
		key     string
		m       ratelimit.Matcher
		method  string
		applies bool
	}{
		{"equal GET, HEAD", ratelimit.PropertyMethod, ratelimit.Equal("GET"), "HEAD", true},
		{"equal GET, GET", ratelimit.PropertyMethod, ratelimit.Equal("GET"), "GET", true},
		{"equal GET, POST", ratelimit.PropertyMethod, ratelimit.Equal("GET"), "POST", false},
		{"one_of with GET, HEAD", ratelimit.PropertyMethod, ratelimit.OneOf("POST", "GET"), "HEAD", true},
		{"regex matching GET, HEAD", ratelimit.PropertyMethod, ratelimit.Regex("^G"), "HEAD", true},
		{"equal POST, HEAD", ratelimit.PropertyMethod, ratelimit.Equal("POST"), "HEAD", false},
		{"one_of writes, HEAD", ratelimit.PropertyMethod, ratelimit.OneOf("POST", "PUT"), "HEAD", false},
		{"equal HEAD, GET", ratelimit.PropertyMethod, ratelimit.Equal("HEAD"), "GET", false},
		{"equal HEAD, HEAD", ratelimit.PropertyMethod, ratelimit.Equal("HEAD"), "HEAD", true},
		{"lower-case head is not HEAD", ratelimit.PropertyMethod, ratelimit.Equal("GET"), "head", false},
		{"another property", "verb", ratelimit.Equal("GET"), "HEAD", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ratelimit.Rule{Name: "r", Match: map[string]ratelimit.Matcher{tt.key: tt.m}, Limit: 1, Period: time.Minute}
			l, err := ratelimit.New(ratelimit.Config{Name: "head", Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{r}})
			if err != nil {
				t.Fatal(err)
			}
			id := ratelimit.Identifier{tt.key: tt.method}
			l.Check(context.Background(), id)
			res := l.Check(context.Background(), id)
			if got := res.Blocked(); got != tt.applies {
				t.Errorf("second check blocked = %v, want %v (the rule applies: %v)", got, tt.applies, tt.applies)
			}
			if got := len(r.MatchFailures(id)) == 0; got != tt.applies {
				t.Errorf("MatchFailures = %q, want the rule to apply: %v", r.MatchFailures(id), tt.applies)
			}
		})
	}
}
