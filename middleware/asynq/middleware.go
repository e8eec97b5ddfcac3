package ratelimitasynq

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/guard"
	"github.com/ratekit/ratekit/middleware/adapter"
)

// DenyFunc decides what the middleware returns for a blocked task. The default
// returns err itself; a DenyFunc may log, wrap it (keep it in the chain so that
// IsFailure and RetryDelay still see it) or return asynq.SkipRetry to drop the
// task instead. A nil return means err: asynq would count nil as success and
// forget the task, which never ran.
type DenyFunc func(ctx context.Context, t *asynq.Task, res ratelimit.Result, err *RateLimitError) error

// Option configures Middleware.
type Option interface{ apply(*config) }

type optionFunc func(*config)
type set guard.Setting[Outcome] // a setting every adapter offers

func (f optionFunc) apply(c *config) { f(c) }
func (s set) apply(c *config)        { s(&c.Settings) }

type config struct {
	guard.Options[*asynq.Task, Outcome]
	deny DenyFunc
}

// WithLimiters adds limiters, checked in order after the first one. The first
// limiter that blocks ends the check: later limiters are not counted.
func WithLimiters(limiters ...*ratelimit.Limiter) Option {
	return set(guard.WithLimiters[Outcome](limiters...))
}

// WithIdentifier replaces DefaultIdentifier. Start from DefaultIdentifier(ctx, t)
// to keep its properties.
func WithIdentifier(f func(ctx context.Context, t *asynq.Task) ratelimit.Identifier) Option {
	return optionFunc(func(c *config) { c.Identify = f })
}

// WithProperties adds or replaces identifier properties after the identifier
// is built, by DefaultIdentifier or WithIdentifier's function, for example a
// tenant read from the payload.
func WithProperties(f func(ctx context.Context, t *asynq.Task, id ratelimit.Identifier)) Option {
	return optionFunc(func(c *config) { c.Properties = f })
}

// WithSkip exempts the tasks for which f returns true: they run without any
// check.
func WithSkip(f func(ctx context.Context, t *asynq.Task) bool) Option {
	return optionFunc(func(c *config) { c.Skip = f })
}

// WithCost sets the cost each check before the handler charges (default 1),
// to weigh tasks: a bulk export may count as 10. A cost of 0 checks without
// counting.
func WithCost(f func(ctx context.Context, t *asynq.Task) float64) Option {
	return optionFunc(func(c *config) { c.Cost = f })
}

// WithDenyHandler sets what a blocked task returns (see DenyFunc).
func WithDenyHandler(f DenyFunc) Option { return optionFunc(func(c *config) { c.deny = f }) }

// WithJitter adds a random delay of up to max, in whole seconds, to RetryIn,
// so that the tasks blocked in one window do not all come back at the same
// instant when it resets.
func WithJitter(max time.Duration) Option { return set(guard.WithRetryAfterJitter[Outcome](max)) }

// Deferred is a limiter charged after the handler, with a cost known only
// then (docs/design.md#cost): an adapter.Deferred whose Charge reads the
// task's Outcome. Before the handler it is peeked, and a task it would block
// is not run but retried after the reset, like any blocked task. The charge
// is made even if the task's context was cancelled (a deadline, a shutdown)
// or the handler panicked (a failure, as asynq counts it), because the work
// was done.
type Deferred = adapter.Deferred[Outcome]

// errPanicked is the Err of the Outcome of a handler that panicked: asynq
// recovers the panic and counts the task as failed.
var errPanicked = errors.New("ratelimitasynq: the handler panicked")

// Outcome is what is known once the handler has returned, or panicked.
type Outcome struct {
	Task  *asynq.Task
	Err   error          // the handler's error (one that IsFailure reports if it panicked)
	Meter *adapter.Meter // the task's cost meter
}

// WithDeferred adds limiters charged after the handler (see Metered and
// CountFailures).
func WithDeferred(d ...Deferred) Option { return set(guard.WithDeferred(d...)) }

// Metered charges l with the named cost that the handler reported through
// adapter.AddCost(ctx, name, v) (database seconds, partner API calls). The
// middleware gives the handler a context with an adapter.Meter.
func Metered(l *ratelimit.Limiter, name string) Deferred {
	return guard.Metered[Outcome](l, name)
}

// CountFailures charges l with 1 for each task whose handler failed (IsFailure),
// so that a task type failing against, say, a partner API that is down runs at
// most the limit's number of failing attempts per window. Before the handler,
// a task is blocked when one more failure would exceed the limit.
func CountFailures(l *ratelimit.Limiter) Deferred {
	return guard.CountWhen(l, func(o Outcome) bool { return IsFailure(o.Err) })
}

// WithClock sets the clock RetryIn is computed with (default time.Now), for
// tests. It is read once per checked task.
func WithClock(now func() time.Time) Option { return set(guard.WithClock[Outcome](now)) }

// DefaultIdentifier returns {task_type: t.Type(), queue: <queue>}; queue is
// present only when ctx comes from an asynq server.
func DefaultIdentifier(ctx context.Context, t *asynq.Task) ratelimit.Identifier {
	id := ratelimit.Identifier{identifiers.TaskType: t.Type()}
	if q, ok := asynq.GetQueueName(ctx); ok {
		id[identifiers.Queue] = q
	}
	return id
}

// Middleware returns an asynq middleware that checks limiter (and those added
// with WithLimiters) before each task. A blocked task is not run: the middleware
// returns a *RateLimitError whose RetryIn is the time until the blocking rule's
// window resets. Configure the server with IsFailure and RetryDelay so that the
// task is retried then, without counting as failed or using up its retries:
//
//	srv := asynq.NewServer(redisOpt, asynq.Config{
//		IsFailure:      ratelimitasynq.IsFailure,
//		RetryDelayFunc: ratelimitasynq.RetryDelay,
//	})
//	mux := asynq.NewServeMux()
//	mux.Use(ratelimitasynq.Middleware(limiter))
//
// A limiter whose store fails (the check fails open) never blocks; the others
// still do. Log rules (shadow mode) never block. limiter may be nil when
// options give them all (WithLimiters, WithDeferred); no limiter at all, a
// nil limiter in WithLimiters, or a Deferred without Limiter or Charge,
// panics here: a programming error found at start-up.
func Middleware(limiter *ratelimit.Limiter, opts ...Option) asynq.MiddlewareFunc {
	c := &config{}
	if limiter != nil {
		c.Limiters = []*ratelimit.Limiter{limiter}
	}
	for _, o := range opts {
		o.apply(c)
	}
	c.Init("ratelimitasynq: Middleware", DefaultIdentifier) // panics on no limiter or a nil one: found at start-up
	c.Panicked = func(ctx context.Context, t *asynq.Task) Outcome {
		return Outcome{Task: t, Err: errPanicked, Meter: adapter.MeterFrom(ctx)}
	}
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return c.Serve(ctx, t, nil, func(ch guard.Checked, res ratelimit.Result) Outcome {
				return Outcome{Task: t, Err: c.blocked(ctx, t, res, ch.Now)}
			}, func(err error) Outcome {
				return Outcome{Task: t, Err: err} // as asynq fails a task whose context ended
			}, func(ctx context.Context) Outcome {
				return Outcome{Task: t, Err: next.ProcessTask(ctx, t), Meter: adapter.MeterFrom(ctx)}
			}).Err
		})
	}
}

func (c *config) blocked(ctx context.Context, t *asynq.Task, res ratelimit.Result, now time.Time) error {
	err := &RateLimitError{Limiter: res.Limiter}
	if res.Rule != nil {
		err.Rule = res.Rule.Name
	}
	var reset time.Time
	if res.Info != nil {
		reset, err.Never = res.Info.ResetAt, res.Info.Never
	}
	err.RetryIn = guard.Retry(retryIn(now, reset), c.RetryAfterJitter)
	if c.deny != nil {
		if derr := c.deny(ctx, t, res, err); derr != nil {
			return derr
		}
	}
	return err
}

// retryIn returns the whole number of seconds from now until reset, counted on
// Unix-second boundaries. asynq stores a retry's due time as whole Unix seconds
// (rounded down) and forwards the task once that second begins; with
// ceil(reset) - floor(now) seconds the due second is never before reset, so
// the retried task never meets the same window again. At least one second,
// and at most ratelimit.MaxRetryAfter (a reset beyond any Duration).
func retryIn(now, reset time.Time) time.Duration {
	due := reset.Unix()
	if reset.Nanosecond() != 0 {
		due++
	}
	secs := min(max(due-now.Unix(), 1), int64(ratelimit.MaxRetryAfter/time.Second))
	return time.Duration(secs) * time.Second
}
