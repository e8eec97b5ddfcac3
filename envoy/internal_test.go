package ratekitenvoy

import (
	"strings"
	"testing"

	"github.com/ratekit/ratekit/internal/rulecheck"
)

// validProperty agrees with rulecheck.ValidName, which it replaces on the hot path.
func TestValidPropertyAgreesWithValidName(t *testing.T) {
	for _, k := range []string{"", "a", "remote_address", "A", "x-y", "é", "a b", "0_9", strings.Repeat("a", 64), strings.Repeat("a", 65), "a\n", "\x00"} {
		if got, want := validProperty(k), rulecheck.ValidName(k); got != want {
			t.Errorf("validProperty(%q) = %v, ValidName %v", k, got, want)
		}
	}
}

// boundedValue keeps a value within the bound as it is, and stands for a
// longer one by exactly limit bytes that start as it does and differ from
// those of another long value with the same start.
func TestBoundedValue(t *testing.T) {
	long := strings.Repeat("v", 2000)
	for _, tt := range []struct {
		v     string
		limit int
		keeps int // bytes of v the result starts with; -1: v itself
	}{
		{"", 16, -1},
		{long[:1024], 1024, -1},
		{long[:1025], 1024, 1024 - 33},
		{long, 1024, 1024 - 33},
		{long, 33, 0},
		{long, 8, 0}, // the start of the digest alone
	} {
		got := boundedValue(tt.v, tt.limit)
		if tt.keeps < 0 {
			if got != tt.v {
				t.Errorf("%d bytes, limit %d: changed to %q", len(tt.v), tt.limit, got)
			}
			continue
		}
		other := boundedValue(tt.v+"x", tt.limit)
		if len(got) != tt.limit || !strings.HasPrefix(got, tt.v[:tt.keeps]) || got[tt.keeps] != '~' || other == got || len(other) != tt.limit {
			t.Errorf("%d bytes, limit %d: %q (and %q for one more byte), want %d bytes starting with %d of it and a digest",
				len(tt.v), tt.limit, got, other, tt.limit, tt.keeps)
		}
	}
}
