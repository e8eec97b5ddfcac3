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
// cost a 3-rule check more than the check itself (BenchmarkCheck/metrics:
// 1,113-1,129 ns against 485-493 ns without metrics; 793-800 ns with this
// cache).
// So Metrics finds a limiter's and a rule's series once and keeps them in
// a seriesCache; a series is still created only when first updated, so the
// families export exactly what they did without it.

// maxCachedSeries bounds a seriesCache's entries (a limiter or a rule each).
// Rule names are an operator's, but per-request rules (an Envoy override, a
// rules service's answer) can bring many: a full cache is emptied and
// refilled, which costs lookups and never a series (MaxRuleSeries and
// MaxPerRequestRuleSeries bound the series).
const maxCachedSeries = 4096

// seriesCache maps a limiter name to its *limiterSeries and a ruleKey to its
// *ruleSeries. A sync.Map: a check's lookups take no lock.
type seriesCache struct {
	m sync.Map
	n atomic.Int64 // entries stored since the last emptying
}

// ruleKey names a rule of a limiter, and whether it came from a
// per-request tier: a name given OverflowRule in one tier's budget may have
// a label of its own in the other's.
type ruleKey struct {
	limiter, rule string
	perRequest    bool
}

// limiterSeries holds a limiter's series, each resolved on first use.
type limiterSeries struct {
	duration lazy[prometheus.Observer]
	checks   [len(verdictSlots)][2][2]lazy[prometheus.Counter] // verdict × matched × failed
	peeks    [2]lazy[prometheus.Counter]                       // failed
}

// ruleSeries holds a rule's series, each resolved on first use, and the
// rule label they carry (the rule's name, or OverflowRule).
type ruleSeries struct {
	label         string
	limit, period lazy[prometheus.Gauge]
	evals         [len(actionSlots)][len(resultSlots)]lazy[prometheus.Counter] // rule action × result
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

// rule returns the series of rule name of limiter lim, of a per-request
// tier or not; label gives their rule label when they are not cached.
func (c *seriesCache) rule(lim, name string, perRequest bool, label func() string) *ruleSeries {
	k := ruleKey{lim, name, perRequest}
	if v, ok := c.m.Load(k); ok {
		return v.(*ruleSeries)
	}
	return c.store(k, &ruleSeries{label: label()}).(*ruleSeries)
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

// The values that have a slot in limiterSeries and ruleSeries, in slot
// order. Another value (none today) is resolved on every call instead.
var (
	verdictSlots = [...]ratelimit.Verdict{ratelimit.ActionAllow, ratelimit.ActionBlock}
	actionSlots  = [...]ratelimit.Action{ratelimit.ActionLimit, ratelimit.ActionLog, ratelimit.ActionSkip}
	resultSlots  = [...]string{ResultAllow, ResultBlock, ResultLog, ResultSkip, ResultBanned}
)

// b2i is 1 for true.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
