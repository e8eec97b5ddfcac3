package adapter

import (
	"context"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Deferred is a limiter charged after the handler, with a cost known only then
// (docs/design.md#cost). Before the handler it is peeked, and a caller it would
// block is rejected without running the handler. The charge never changes the
// response, and it is made even when the caller has gone away or the handler
// panicked, because the resources were spent.
type Deferred[O any] struct {
	Limiter *ratelimit.Limiter
	// Charge returns the cost to count once the handler has finished, and
	// whether to count at all. ctx is the handler's context without its
	// cancellation; it carries the request's Meter. A cost that is not
	// positive and finite (0, negative, NaN, infinite) counts nothing, as
	// Meter.Add ignores such a value.
	Charge func(ctx context.Context, o O) (cost float64, ok bool)
	// PeekCost is the cost the peek before the handler assumes. 0 blocks only
	// callers already over the limit (right when the cost is unknown until the
	// work is done); 1 blocks callers whom one more counted outcome would put
	// over it, so that a limit of 5 admits exactly 5 counted outcomes. A
	// negative, NaN or infinite PeekCost is refused: the adapter panics
	// when it is built.
	PeekCost float64
}
