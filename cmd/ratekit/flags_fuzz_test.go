package main

import (
	"math/big"
	"strings"
	"testing"
	"time"
)

// FuzzParseDays: an accepted --grace is positive and is what was written,
// N days exactly or the Go duration; a number of days past time.Duration's
// range is refused, not wrapped into another duration.
func FuzzParseDays(f *testing.F) {
	for _, s := range []string{"7d", "36h", "1d", "0d", "-1d", "+2d", "1.5d", "d", "", "1h30m", "106751d", "106752d", "213504d",
		"9223372036854775807d", "2562047h", "2562048h", "1ns"} {
		f.Add(s)
	}
	day := big.NewInt(int64(24 * time.Hour))
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDays(s)
		if err != nil {
			if !strings.Contains(err.Error(), "positive") && !strings.Contains(err.Error(), "longest duration") {
				t.Fatalf("parseDays(%q): error %q does not say what is expected", s, err)
			}
			return
		}
		if d <= 0 {
			t.Fatalf("parseDays(%q) = %v, not positive", s, d)
		}
		if n, ok := strings.CutSuffix(s, "d"); ok {
			want, ok := new(big.Int).SetString(n, 10)
			if !ok || new(big.Int).Mul(want, day).Cmp(big.NewInt(int64(d))) != 0 {
				t.Fatalf("parseDays(%q) = %v, not %s days", s, d, n)
			}
			return
		}
		if want, err := time.ParseDuration(s); err != nil || want != d {
			t.Fatalf("parseDays(%q) = %v, time.ParseDuration gives %v, %v", s, d, want, err)
		}
	})
}
