package observe

import (
	"context"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Observer receives a limiter's events: Metrics, Tracing and BlockSummary
// implement it. Pass one's Observe method as ratelimit.Config.Observer, or
// several to Multi.
type Observer interface {
	Observe(ctx context.Context, e ratelimit.Event)
}

// Func adapts a function to Observer.
type Func func(ctx context.Context, e ratelimit.Event)

// Observe implements Observer.
func (f Func) Observe(ctx context.Context, e ratelimit.Event) { f(ctx, e) }

var _ Observer = Func(nil)

// Multi returns a ratelimit.Config.Observer that hands each event to every
// observer, in order. A panic in one is recovered, so that it neither keeps
// the event from the others nor changes the verdict; nil observers are skipped.
func Multi(obs ...Observer) func(ctx context.Context, e ratelimit.Event) {
	obs = append([]Observer(nil), obs...)
	return func(ctx context.Context, e ratelimit.Event) {
		for _, o := range obs {
			if o != nil {
				observeSafely(ctx, o, e)
			}
		}
	}
}

func observeSafely(ctx context.Context, o Observer, e ratelimit.Event) {
	defer func() { _ = recover() }()
	o.Observe(ctx, e)
}
