package config

import (
	"errors"
	"strings"
	"testing"

	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

func TestConflictMarkersLines(t *testing.T) {
	for _, tt := range []struct {
		data string
		line int // 0: no conflict
	}{
		{"a: 1\n<<<<<<< HEAD\nb: 2\n", 2},
		{"a: 1\n=======\n", 2},
		{"a: 1\r\n>>>>>>> branch\r\n", 2},
		{"|||||||  merged common ancestors\n", 1},
		{"<<<<<<<\n", 1},
		{"a: 1\n  <<<<<<< indented\n", 0},
		{"========\n", 0},
		{"a: \"<<<<<<< in a string\"\n", 0},
		{"", 0},
	} {
		err := conflictMarkers("f.yaml", []byte(tt.data))
		var ve *ValidationError
		errors.As(err, &ve)
		switch {
		case tt.line == 0 && err != nil:
			t.Errorf("%q: unexpected %v", tt.data, err)
		case tt.line > 0 && (ve == nil || len(ve.Errors) != 1 || ve.Errors[0].Line != tt.line || ve.Errors[0].File != "f.yaml"):
			t.Errorf("%q: got %v, want a conflict at line %d", tt.data, err, tt.line)
		}
	}
}

// Every YAML document the package parses is refused whole when it holds
// conflict markers, naming the file and line.
func TestParseRefusesConflictMarkers(t *testing.T) {
	conflicted := "rate_limits:\n  open:\n<<<<<<< HEAD\n    - name: a\n=======\n    - name: b\n>>>>>>> feature\n      action: skip\n"
	want := `r.yaml:3: unresolved merge conflict (line "<<<<<<< HEAD"): resolve it and remove the conflict markers`
	available := mustAvailable(t, guardedAvailable)
	if _, err := ParseRateLimits("r.yaml", []byte(conflicted), available); err == nil || err.Error() != want {
		t.Errorf("ParseRateLimits: %v, want %s", err, want)
	}
	if _, err := ParsePublishRulesRequest("r.yaml", []byte(conflicted), available); err == nil || err.Error() != want {
		t.Errorf("ParsePublishRulesRequest: %v, want %s", err, want)
	}
	// A document of another schema (the rules service's override files).
	if err := ParseMessage("r.yaml", []byte(conflicted), &configv1.RateLimits{}, available); err == nil || err.Error() != want {
		t.Errorf("ParseMessage: %v, want %s", err, want)
	}
	avail := strings.Replace(guardedAvailable, "  guarded:\n", "<<<<<<< ours\n  guarded:\n", 1)
	if _, err := ParseAvailableLimiters("a.yaml", []byte(avail)); err == nil || !strings.HasPrefix(err.Error(), `a.yaml:5: unresolved merge conflict (line "<<<<<<< ours")`) {
		t.Errorf("ParseAvailableLimiters: %v", err)
	}
}
