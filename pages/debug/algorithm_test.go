package debug_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/pages/debug"
)

// How a rule counts is part of what it limits: a token bucket of 10 a minute
// with a burst of 100 admits 100 at once, and a rule that counts the
// identifiers lacking its characteristic (count_missing) counts them all in
// one bucket. The page shows the algorithm, the burst and count_missing as
// the config files and the rule store document spell them, and nothing for a
// fixed window (the default).
func TestAlgorithmShown(t *testing.T) {
	l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{
		{Name: "bucket", Characteristics: []string{"user"}, Limit: 10, Period: time.Minute, Algorithm: ratelimit.TokenBucket, Burst: 100},
		{Name: "bucket_no_burst", Characteristics: []string{"user"}, Limit: 10, Period: time.Minute, Algorithm: ratelimit.TokenBucket},
		{Name: "sliding", Characteristics: []string{"ip"}, Limit: 5, Period: time.Minute, Algorithm: ratelimit.SlidingWindow},
		{Name: "anonymous", Characteristics: []string{"user"}, CountMissing: true, Limit: 50, Period: time.Minute},
		{Name: "fixed", Characteristics: []string{"ip"}, Limit: 7, Period: time.Minute, Algorithm: ratelimit.FixedWindow},
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := (fixture{handler: debug.New(debug.Options{}, l)}).server(t)

	_, body := get(t, srv.URL+"?format=json")
	var raw struct {
		Limiters []struct {
			Rules []map[string]any `json:"rules"`
		} `json:"limiters"`
	}
	if err := json.Unmarshal([]byte(body), &raw); err != nil || len(raw.Limiters) != 1 {
		t.Fatalf("%v\n%s", err, body)
	}
	got := map[string]map[string]any{}
	for _, r := range raw.Limiters[0].Rules {
		got[r["name"].(string)] = r
	}
	for _, tt := range []struct {
		rule         string
		algorithm    any // nil: absent
		burst        any
		countMissing any
	}{
		{"bucket", "token_bucket", float64(100), nil},
		{"bucket_no_burst", "token_bucket", nil, nil},
		{"sliding", "sliding_window", nil, nil},
		{"anonymous", nil, nil, true},
		{"fixed", nil, nil, nil},
	} {
		r := got[tt.rule]
		if r["algorithm"] != tt.algorithm || r["burst"] != tt.burst || r["count_missing"] != tt.countMissing {
			t.Errorf("rule %s: algorithm %v, burst %v, count_missing %v; want %v, %v, %v",
				tt.rule, r["algorithm"], r["burst"], r["count_missing"], tt.algorithm, tt.burst, tt.countMissing)
		}
	}

	_, page := get(t, srv.URL)
	rows := map[string]string{}
	for _, row := range strings.Split(page, "<tr data-rule=")[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(row, `"`), `"`)
		rows[name] = row
	}
	for _, tt := range []struct {
		rule, want, not string
	}{
		{"bucket", `<td class="num">10<br><small class="algorithm">token_bucket, burst 100</small></td>`, ""},
		{"bucket_no_burst", `<td class="num">10<br><small class="algorithm">token_bucket</small></td>`, ", burst"},
		{"sliding", `<td class="num">5<br><small class="algorithm">sliding_window</small></td>`, ""},
		{"anonymous", `user<br><small class="count-missing">identifiers lacking it share one counter</small>`, "algorithm"},
		{"fixed", `<td class="num">7</td>`, "algorithm"},
	} {
		row := rows[tt.rule]
		if !strings.Contains(row, tt.want) || (tt.not != "" && strings.Contains(row, tt.not)) {
			t.Errorf("rule %s: row lacks %s (or holds %q):\n%s", tt.rule, tt.want, tt.not, row)
		}
	}
}
