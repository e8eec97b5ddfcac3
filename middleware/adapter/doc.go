// Package adapter holds what application code and the options of every
// framework adapter (ratelimithttp, ratelimitecho, ratelimitgin,
// ratelimitgrpc, ratelimitasynq) share:
//
//   - Meter and AddCost: the costs a handler measures while it runs
//     (docs/design.md#cost), which the adapter charges once it returns.
//   - Deferred: a limiter charged after the handler with such a cost, or
//     with an outcome (each adapter's Metered and CountStatus, CountCodes or
//     CountFailures build one).
//
// Application code needs only AddCost:
//
//	adapter.AddCost(ctx, "db_duration_s", time.Since(start).Seconds())
//
// How a verdict is rendered (headers, problem body) is package
// ratelimitheaders'. The package imports the standard library and core only,
// so that every adapter can use it without pulling in another's framework.
package adapter
