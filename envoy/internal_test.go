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
