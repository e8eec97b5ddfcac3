// Package ratelimitasynq rate-limits asynq (github.com/hibiken/asynq) task
// handlers with ratekit limiters.
//
// Middleware checks every task before its handler runs, with the identifier
// {task_type, queue} by default (replace it with WithIdentifier; WithProperties
// adds to whichever identifier is built, the same in every ratekit adapter). A blocked task is not run: the middleware returns a
// *RateLimitError carrying RetryIn, the time until the blocking rule's window
// resets. With the server configured as
//
//	asynq.Config{
//		IsFailure:      ratelimitasynq.IsFailure,  // a rate limit is not a failure
//		RetryDelayFunc: ratelimitasynq.RetryDelay, // retry when the window resets
//	}
//
// the task goes back to the retry set and runs again after the reset, its
// Retried count unchanged and nothing recorded as failed. With a Redis store
// (redisstore.New) the limit is global across every worker process, unlike the
// per-process token bucket of asynq's "Rate Limiting" wiki page.
//
// # Caveats
//
//   - asynq archives a task whose retries are exhausted before it consults
//     IsFailure: a task enqueued with asynq.MaxRetry(0) is archived the first
//     time it is blocked. Give rate-limited task types a retry budget.
//   - asynq keeps retry times in whole Unix seconds and moves due tasks back to
//     their queue every Config.DelayedTaskCheckInterval (5 s by default). A
//     blocked task therefore runs up to about that much after the reset. RetryIn
//     is counted on whole-second boundaries so that it is never early. Lower the
//     interval (tests use 100 ms) for tighter retries, at the cost of more
//     Redis polling.
//   - Config.ErrorHandler is called for rate-limit errors too; use
//     AsRateLimitError to tell them apart, for example to keep them out of error
//     reports.
//   - Fail-open: a limiter whose check fails (its store down or slow) never
//     blocks the task: a rate limiter must not stop the work when its own
//     store is unavailable. The other limiters are still checked, and a healthy
//     one still blocks. The rule is ratelimitheaders.Decision's, the same in the HTTP
//     and gRPC adapters (which also send no rate-limit headers or metadata
//     from a failed limiter). A task whose context ended during the checks (a
//     shutdown, its deadline: a check failed open with ratelimit.ErrCanceled,
//     counting nothing) does not run, as it would uncounted: the middleware
//     returns that error, as asynq fails such a task.
//   - Never sleep in a handler to wait for a limit: that holds a worker and its
//     lease. Return the error and let asynq schedule the retry.
//   - Tasks blocked in one window all come back when it resets; WithJitter
//     spreads them.
//   - A task whose cost alone is over its rule's fixed limit (a token
//     bucket's burst) can never run: its RateLimitError has Never set and
//     wraps asynq.SkipRetry, so asynq archives it rather than retry it for
//     good. A LimitFunc's limit (0 pauses a queue in an incident) never
//     archives: the task is retried when the window resets.
//
// Cost hooks (costs known after the work, docs/design.md#cost): WithDeferred adds limiters charged after
// the handler. Metered charges what the task measured through
// adapter.AddCost (database seconds, API calls), and CountFailures counts
// failed tasks only. Both are peeked before the handler, so a task whose scope
// is already over budget is retried after the reset instead of running.
// WithCost weighs tasks up front instead. WithClock sets the clock RetryIn is
// computed with, read once per task.
package ratelimitasynq
