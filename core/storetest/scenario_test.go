package storetest

import (
	"strings"
	"testing"
)

// TestParseScenarioRefusesStepsThatCheckNothing: a step is exactly one
// operation, and an expectation or option it cannot use is an error, as an
// unknown key is: otherwise a misplaced `cleared`, a check beside an advance
// or an `expect` on an advance would be dropped, and the scenario would pass
// without checking it.
func TestParseScenarioRefusesStepsThatCheckNothing(t *testing.T) {
	const rules = "rules:\n  - {name: r, limit: 1, period_s: 60, action: limit}\nsteps:\n"
	tests := []struct {
		name string
		step string
		want string // "" for valid
	}{
		{"check", "  - check: {user: a}\n    cost: 2\n    repeat: 2\n    expect: {action: allow}\n", ""},
		{"clear", "  - clear: {user: a}\n    expect: {cleared: 0}\n", ""},
		{"advance", "  - advance_s: 1\n", ""},
		{"check and peek", "  - check: {user: a}\n    peek: {user: a}\n", "exactly one of"},
		{"check and advance", "  - check: {user: a}\n    advance_s: 5\n", "exactly one of"},
		{"clear and set_rules", "  - clear: {user: a}\n    set_rules: []\n", "exactly one of"},
		{"empty", "  - expect: {action: allow}\n", "exactly one of"},
		{"negative advance", "  - advance_s: -1\n", "advance_s"},
		{"cleared on a check", "  - check: {user: a}\n    expect: {cleared: 1}\n", "cleared"},
		{"action on a clear", "  - clear: {user: a}\n    expect: {action: allow}\n", "expect"},
		{"expect on an advance", "  - advance_s: 1\n    expect: {action: allow}\n", "expect"},
		{"cost on a clear", "  - clear: {user: a}\n    cost: 2\n", "cost"},
		{"repeat on set_rules", "  - set_rules: []\n    repeat: 2\n", "repeat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseScenario([]byte(rules + tt.step))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("parse: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parse: %v, want an error with %q", err, tt.want)
			}
		})
	}
}
