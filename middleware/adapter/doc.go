// Package adapter is what the framework adapters (ratelimithttp,
// ratelimitecho, ratelimitgin, ratelimitgrpc, ratelimitasynq) share, so that
// a request, a call and a task go through the same steps:
//
//   - Options: the settings every adapter offers (limiters, deferred
//     limiters, identifier builder, extra properties, skip, cost, clock) and
//     the prelude each request runs through (Options.Check): build the
//     identifier, check the limiters with the request's cost, read the clock
//     once.
//   - Guard: the checks of one request. Deferred limiters are peeked before
//     the handler and charged after it (Metered, CountWhen); the limiters are
//     checked in order and the first that blocks ends the checks.
//   - Decision: the combined verdict that each adapter renders (headers, a
//     gRPC status, a task's retry delay). A limiter that failed open never
//     blocks and contributes nothing.
//   - Meter and AddCost: the costs a handler measures while it runs
//     (docs/design.md#cost), which Metered charges once it returns.
//
// Application code needs only AddCost:
//
//	adapter.AddCost(ctx, "db_duration_s", time.Since(start).Seconds())
//
// The package imports the standard library, core and identifiers only, so
// that every adapter can use it without pulling in another's framework.
package adapter
