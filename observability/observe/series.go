package observe

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Observing a check updates 2 + 3 × (rules evaluated) series. Finding a
// series by its label values (CounterVec.WithLabelValues) hashes and
// validates every value under the vector's lock: on the memory store that
// cost a 3-rule check more than the check itself (BenchmarkCheck/metrics).
// So Metrics finds a limiter's and a rule's series once and keeps them in
// a seriesCache; a series is still created only when first updated, so the
// families export exactly what they did without it.

// maxCachedSeries bounds a seriesCache's entries (a limiter or a rule each).
// Rule names are an operator's, but per-request rules (an Envoy override, a
// rules service's answer) can bring many: a full cache is emptied and
// refilled, which costs lookups and never a series.
const maxCachedSeries = 4096

// seriesCache maps a limiter name to its *limiterSeries and a ruleKey to its
// *ruleSeries. A sync.Map: a check's lookups take no lock.
type seriesCache struct {
	m sync.Map
	n atomic.Int64 // entries stored since the last emptying
}

// ruleKey names a rule of a limiter.
type ruleKey struct{ limiter, rule string }

// limiterSeries holds a limiter's series, each resolved on first use.
type limiterSeries struct {
	duration lazy[prometheus.Observer]
	checks   [2][2][2]lazy[prometheus.Counter] // verdict (allow, block) × matched × failed
	peeks    [2]lazy[prometheus.Counter]       // failed
}

// ruleSeries holds a rule's series, each resolved on first use.
type ruleSeries struct {
	limit, period lazy[prometheus.Gauge]
	evals         [3][5]lazy[prometheus.Counter] // rule action (limit, log, skip) × result
}

// lazy is one series, resolved by the first caller.
type lazy[T any] struct{ p atomic.Pointer[T] }

// get returns the series, resolving it with resolve the first time. Two
// first callers may both resolve it: a vector returns the same series.
func (l *lazy[T]) get(resolve func() T) T {
	if p := l.p.Load(); p != nil {
		return *p
	}
	v := resolve()
	l.p.Store(&v)
	return v
}

// limiter returns the series of limiter lim.
func (c *seriesCache) limiter(lim string) *limiterSeries {
	if v, ok := c.m.Load(lim); ok {
		return v.(*limiterSeries)
	}
	return c.store(lim, &limiterSeries{}).(*limiterSeries)
}

// rule returns the series of rule name of limiter lim.
func (c *seriesCache) rule(lim, name string) *ruleSeries {
	k := ruleKey{lim, name}
	if v, ok := c.m.Load(k); ok {
		return v.(*ruleSeries)
	}
	return c.store(k, &ruleSeries{}).(*ruleSeries)
}

// store adds v under k unless another caller did first, emptying the cache
// first when it is full, and returns what k maps to.
func (c *seriesCache) store(k, v any) any {
	if c.n.Add(1) > maxCachedSeries {
		c.m.Clear()
		c.n.Store(1)
	}
	got, loaded := c.m.LoadOrStore(k, v)
	if loaded {
		c.n.Add(-1)
	}
	return got
}

// verdictIndex is the index of a check's verdict in limiterSeries.checks,
// or -1 for one without a slot (resolved on every call instead).
func verdictIndex(v ratelimit.Verdict) int {
	switch v {
	case ratelimit.ActionAllow:
		return 0
	case ratelimit.ActionBlock:
		return 1
	}
	return -1
}

// ruleActionIndex is the index of a rule's action in ruleSeries.evals, or -1.
func ruleActionIndex(a ratelimit.Action) int {
	switch a {
	case ratelimit.ActionLimit:
		return 0
	case ratelimit.ActionLog:
		return 1
	case ratelimit.ActionSkip:
		return 2
	}
	return -1
}

// resultIndex is the index of an evaluation's result in ruleSeries.evals, or -1.
func resultIndex(r string) int {
	switch r {
	case ResultAllow:
		return 0
	case ResultBlock:
		return 1
	case ResultLog:
		return 2
	case ResultSkip:
		return 3
	case ResultBanned:
		return 4
	}
	return -1
}

// b2i is 1 for true.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
