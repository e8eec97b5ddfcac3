package adapter

import (
	"context"
	"math"
	"sync"
)

// Meter accumulates the resources one request consumes (docs/design.md#cost):
// database seconds, Gitaly calls, bytes. Application code adds to it through
// AddCost while the request runs; an adapter reads it after the handler and
// charges a resource limiter with the measured value (Check with Cost).
//
// A Meter is safe for concurrent use; a nil *Meter ignores additions and reads 0.
type Meter struct {
	mu     sync.Mutex
	values map[string]float64
}

type meterKey struct{}

// WithMeter returns a context carrying a Meter, and the Meter. If ctx already
// carries one, it returns ctx and that Meter, so that nested middleware share a
// single meter and no addition is lost to an inner one.
func WithMeter(ctx context.Context) (context.Context, *Meter) {
	if m := MeterFrom(ctx); m != nil {
		return ctx, m
	}
	m := &Meter{}
	return context.WithValue(ctx, meterKey{}, m), m
}

// MeterFrom returns the Meter of ctx, or nil.
func MeterFrom(ctx context.Context) *Meter {
	m, _ := ctx.Value(meterKey{}).(*Meter)
	return m
}

// AddCost adds v to the named cost of the request's Meter. Without a Meter in
// ctx it does nothing, so libraries may call it unconditionally.
func AddCost(ctx context.Context, name string, v float64) {
	MeterFrom(ctx).Add(name, v)
}

// Add adds v to the named cost. Negative, NaN and infinite values are ignored:
// a cost only grows, and a bad measurement must not poison the charge (a
// non-finite cost would fail the check open). A sum past the largest finite
// float64 stays at it, for the same reason.
func (m *Meter) Add(name string, v float64) {
	if m == nil || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return
	}
	m.mu.Lock()
	if m.values == nil {
		m.values = make(map[string]float64)
	}
	m.values[name] = min(m.values[name]+v, math.MaxFloat64)
	m.mu.Unlock()
}

// Value returns the named cost accumulated so far (0 if none).
func (m *Meter) Value(name string) float64 {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.values[name]
}

// Values returns a copy of every cost accumulated so far.
func (m *Meter) Values() map[string]float64 {
	out := map[string]float64{}
	if m == nil {
		return out
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range m.values {
		out[k] = v
	}
	return out
}
