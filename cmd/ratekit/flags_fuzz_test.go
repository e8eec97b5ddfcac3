package main

import (
	"bytes"
	"context"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ratekit/ratekit/controlplane/rollout"
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

// FuzzScrape feeds arbitrary /metrics text to the rollout gate's reader: an
// accepted scrape adds each series' count, rounded, to its limiter, rule and
// agreement exactly, and the totals fit in the gate's counters; a count that
// does not fit is refused, never wrapped around into another one.
func FuzzScrape(f *testing.F) {
	const family = "ratelimit_rollout_decisions_total"
	head := "# TYPE " + family + " counter\n"
	for _, s := range []string{
		head + family + `{rate_limiter="search",rule="r",agreement="agree"} 3` + "\n",
		head + family + `{rate_limiter="search",rule="r",agreement="new_only"} 2.5` + "\n" + family + `{rate_limiter="search",rule="s",agreement="agree",job="b"} 7` + "\n",
		head + family + `{rate_limiter="search",agreement="failed"} 1e19` + "\n" + family + `{rate_limiter="search",agreement="failed",job="b"} 1e19` + "\n",
		head + family + `{rate_limiter="search",rule="r",agreement="agree"} 1e20` + "\n",
		head + family + `{rate_limiter="search",rule="r",agreement="legacy_only"} NaN` + "\n",
		head + family + `{rate_limiter="search",rule="r",agreement="agree"} -1` + "\n",
		"# TYPE other counter\nother 1\n",
		"garbage",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "metrics.txt")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		counts := map[string]map[string]*rollout.Counts{}
		if err := scrapeInto(context.Background(), path, family, counts); err != nil {
			return
		}
		// The sums the scrape holds, computed without a bound.
		want := map[string]*big.Int{}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("accepted a scrape that does not parse: %v", err)
		}
		for _, m := range fams[family].GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			rule := labels["rule"]
			if rule == "" {
				rule = rollout.NoRule
			}
			k := labels["rate_limiter"] + "\x00" + rule + "\x00" + labels["agreement"]
			n, _ := new(big.Float).SetFloat64(math.Round(m.GetCounter().GetValue())).Int(nil)
			if want[k] == nil {
				want[k] = new(big.Int)
			}
			want[k].Add(want[k], n)
		}
		for k, n := range want {
			parts := strings.Split(k, "\x00")
			c := counts[parts[0]][parts[1]]
			got := map[rollout.Agreement]uint64{rollout.Agree: c.Agree, rollout.NewOnly: c.NewOnly, rollout.LegacyOnly: c.LegacyOnly, rollout.Failed: c.Failed}[rollout.Agreement(parts[2])]
			if new(big.Int).SetUint64(got).Cmp(n) != 0 {
				t.Fatalf("%s rule %s %s: the gate counts %d, the scrape holds %s", parts[0], parts[1], parts[2], got, n)
			}
		}
		for l, rules := range counts {
			for r, c := range rules {
				if total := new(big.Int).SetUint64(c.Agree); total.Add(total, new(big.Int).SetUint64(c.NewOnly)).Add(total, new(big.Int).SetUint64(c.LegacyOnly)).
					Add(total, new(big.Int).SetUint64(c.Failed)).Cmp(new(big.Int).SetUint64(math.MaxUint64)) > 0 {
					t.Fatalf("%s rule %s: counts %+v overflow the gate's sums", l, r, *c)
				}
			}
		}
	})
}
