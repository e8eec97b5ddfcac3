package observe

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	ratelimit "github.com/ratekit/ratekit/core"
)

// cacheLimiters spread the cache tests' rules over limiters, so that each
// limiter keeps its rules' names (MaxRuleSeries) while the cache overflows.
const cacheLimiters = 8

// cacheLimiter is the limiter of rule i in the cache tests.
func cacheLimiter(i int) string { return "api" + strconv.Itoa(i%cacheLimiters) }

// checksTotal sums checks_total{action="allow",matched="true",error="false"}
// over the cache tests' limiters.
func checksTotal(m *Metrics) float64 {
	var n float64
	for i := range cacheLimiters {
		n += testutil.ToFloat64(m.checks.WithLabelValues(cacheLimiter(i), "allow", "true", "false"))
	}
	return n
}

// The series cache stays within maxCachedSeries entries however many rules
// checks bring, and emptying it loses no count: every rule's series holds
// what two passes over all the rules observed.
func TestSeriesCacheBound(t *testing.T) {
	m := NewMetrics(MetricsOptions{})
	const rules = maxCachedSeries + 500
	if rules/cacheLimiters >= MaxRuleSeries {
		t.Fatalf("%d rules per limiter: over MaxRuleSeries, some would be folded", rules/cacheLimiters)
	}
	check := func(i int) {
		rule := &ratelimit.Rule{Name: "r" + strconv.Itoa(i), Action: ratelimit.ActionLimit}
		m.Observe(context.Background(), ratelimit.Event{Kind: ratelimit.EventCheck, Limiter: cacheLimiter(i),
			Result: &ratelimit.Result{Action: ratelimit.ActionAllow, Matched: true, Rule: rule, Evaluations: []ratelimit.Evaluation{{
				Rule: rule, Info: ratelimit.Info{Limit: int64(i + 1), Period: time.Minute}}}}})
	}
	for range 2 {
		for i := range rules {
			check(i)
			if n := m.series.n.Load(); n > maxCachedSeries {
				t.Fatalf("after rule %d the cache counts %d entries, over %d", i, n, maxCachedSeries)
			}
		}
	}
	entries := 0
	m.series.m.Range(func(any, any) bool { entries++; return true })
	if entries > maxCachedSeries {
		t.Fatalf("the cache holds %d entries, over %d", entries, maxCachedSeries)
	}
	if got := checksTotal(m); got != 2*rules {
		t.Errorf("checks_total = %v, want %d", got, 2*rules)
	}
	for _, i := range []int{0, 1, maxCachedSeries - 1, maxCachedSeries, rules - 1} {
		name := "r" + strconv.Itoa(i)
		if got := testutil.ToFloat64(m.evals.WithLabelValues(cacheLimiter(i), name, "limit", ResultAllow)); got != 2 {
			t.Errorf("rule %s: evaluations = %v, want 2", name, got)
		}
		if got := testutil.ToFloat64(m.limit.WithLabelValues(cacheLimiter(i), name)); got != float64(i+1) {
			t.Errorf("rule %s: limit = %v, want %d", name, got, i+1)
		}
	}
	if n := testutil.CollectAndCount(m.evals); n != rules {
		t.Errorf("%d evaluation series, want %d", n, rules)
	}
}

// Concurrent checks through a cache that fills and empties lose no count:
// each goroutine observes every rule once, over more rules than the cache
// holds, and every rule's evaluations come out at the number of goroutines.
func TestSeriesCacheConcurrent(t *testing.T) {
	m := NewMetrics(MetricsOptions{})
	const goroutines, rules = 8, maxCachedSeries + 1000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range rules {
				j := (i + g*97) % rules
				rule := &ratelimit.Rule{Name: "r" + strconv.Itoa(j), Action: ratelimit.ActionLog}
				m.Observe(context.Background(), ratelimit.Event{Kind: ratelimit.EventCheck, Limiter: cacheLimiter(j),
					Result: &ratelimit.Result{Action: ratelimit.ActionAllow, Matched: true, Rule: rule, Evaluations: []ratelimit.Evaluation{{
						Rule: rule, Exceeded: true, Info: ratelimit.Info{Limit: 5, Period: time.Minute}}}}})
			}
		})
	}
	wg.Wait()
	if got := checksTotal(m); got != goroutines*rules {
		t.Errorf("checks_total = %v, want %d", got, goroutines*rules)
	}
	for _, i := range []int{0, 1, rules / 2, rules - 1} {
		name := "r" + strconv.Itoa(i)
		if got := testutil.ToFloat64(m.evals.WithLabelValues(cacheLimiter(i), name, "log", ResultLog)); got != goroutines {
			t.Errorf("rule %s: evaluations = %v, want %d", name, got, goroutines)
		}
	}
}
