package ratelimitasynq

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
)

// DenyFunc decides what the middleware returns for a blocked task. The default
// returns err itself; a DenyFunc may log, wrap it (keep it in the chain so that
// IsFailure and RetryDelay still see it) or return asynq.SkipRetry to drop the
// task instead.
type DenyFunc func(ctx context.Context, t *asynq.Task, res ratelimit.Result, err *RateLimitError) error

// Option configures Middleware.
type Option func(*config)

type config struct {
	guard      ratelimit.Guard[Outcome]
	identify   func(ctx context.Context, t *asynq.Task) ratelimit.Identifier
	properties func(ctx context.Context, t *asynq.Task, id ratelimit.Identifier)
	skip       func(ctx context.Context, t *asynq.Task) bool
	cost       func(ctx context.Context, t *asynq.Task) float64
	deny       DenyFunc
	jitter     time.Duration
	now        func() time.Time
}

// WithLimiters adds limiters, checked in order after the first one. The first
// limiter that blocks ends the check: later limiters are not counted.
func WithLimiters(limiters ...*ratelimit.Limiter) Option {
	return func(c *config) { c.guard.Limiters = append(c.guard.Limiters, limiters...) }
}

// WithIdentifier replaces DefaultIdentifier. Start from DefaultIdentifier(ctx, t)
// to keep its properties.
func WithIdentifier(f func(ctx context.Context, t *asynq.Task) ratelimit.Identifier) Option {
	return func(c *config) { c.identify = f }
}

// WithProperties adds or replaces identifier properties after the identifier
// is built, for example a tenant read from the payload.
func WithProperties(f func(ctx context.Context, t *asynq.Task, id ratelimit.Identifier)) Option {
	return func(c *config) { c.properties = f }
}

// WithSkip exempts the tasks for which f returns true: they run without any
// check.
func WithSkip(f func(ctx context.Context, t *asynq.Task) bool) Option {
	return func(c *config) { c.skip = f }
}

// WithCost sets the cost each check before the handler charges (default 1),
// to weigh tasks: a bulk export may count as 10. A cost of 0 checks without
// counting.
func WithCost(f func(ctx context.Context, t *asynq.Task) float64) Option {
	return func(c *config) { c.cost = f }
}

// WithDenyHandler sets what a blocked task returns (see DenyFunc).
func WithDenyHandler(f DenyFunc) Option { return func(c *config) { c.deny = f } }

// WithJitter adds a random delay of up to max, in whole seconds, to RetryIn,
// so that the tasks blocked in one window do not all come back at the same
// instant when it resets.
func WithJitter(max time.Duration) Option { return func(c *config) { c.jitter = max } }

// Deferred is a limiter charged after the handler, with a cost known only
// then (docs/design.md#cost): a ratelimit.Deferred whose Charge reads the
// task's Outcome. Before the handler it is peeked, and a task it would block
// is not run but retried after the reset, like any blocked task. The charge
// is made even if the task's context was cancelled (a deadline, a shutdown),
// because the work was done.
type Deferred = ratelimit.Deferred[Outcome]

// Outcome is what is known once the handler has returned.
type Outcome struct {
	Task  *asynq.Task
	Err   error            // the handler's error
	Meter *ratelimit.Meter // the task's cost meter
}

// WithDeferred adds limiters charged after the handler (see Metered and
// CountFailures).
func WithDeferred(d ...Deferred) Option {
	return func(c *config) { c.guard.Deferred = append(c.guard.Deferred, d...) }
}

// Metered charges l with the named cost that the handler reported through
// ratelimit.AddCost(ctx, name, v) (database seconds, partner API calls). The
// middleware gives the handler a context with a ratelimit.Meter.
func Metered(l *ratelimit.Limiter, name string) Deferred {
	return ratelimit.Metered[Outcome](l, name)
}

// CountFailures charges l with 1 for each task whose handler failed (IsFailure),
// so that a task type failing against, say, a partner API that is down runs at
// most the limit's number of failing attempts per window. Before the handler,
// a task is blocked when one more failure would exceed the limit.
func CountFailures(l *ratelimit.Limiter) Deferred {
	return ratelimit.CountWhen(l, func(o Outcome) bool { return IsFailure(o.Err) })
}

// withClock sets the clock RetryIn is computed with (tests).
func withClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

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
// still do. Log rules (shadow mode) never block. Middleware panics if a
// limiter is nil: that is a programming error found at start-up.
func Middleware(limiter *ratelimit.Limiter, opts ...Option) asynq.MiddlewareFunc {
	c := &config{guard: ratelimit.Guard[Outcome]{Limiters: []*ratelimit.Limiter{limiter}}, now: time.Now}
	for _, o := range opts {
		o(c)
	}
	if err := c.guard.Validate(); err != nil {
		panic("ratelimitasynq: Middleware: " + err.Error()) // a programming error, found at start-up
	}
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			if c.skip != nil && c.skip(ctx, t) {
				return next.ProcessTask(ctx, t)
			}
			id := c.identifier(ctx, t)
			var opts []ratelimit.CheckOption
			if c.cost != nil {
				opts = append(opts, ratelimit.Cost(c.cost(ctx, t)))
			}
			if res := c.guard.Check(ctx, id, opts...).BlockedBy(); res != nil {
				return c.blocked(ctx, t, *res)
			}
			o := c.guard.Run(ctx, id, func(ctx context.Context) Outcome {
				return Outcome{Task: t, Err: next.ProcessTask(ctx, t), Meter: ratelimit.MeterFrom(ctx)}
			})
			return o.Err
		})
	}
}

func (c *config) identifier(ctx context.Context, t *asynq.Task) ratelimit.Identifier {
	var id ratelimit.Identifier
	if c.identify != nil {
		id = c.identify(ctx, t)
	} else {
		id = DefaultIdentifier(ctx, t)
	}
	if c.properties != nil {
		if id == nil {
			id = ratelimit.Identifier{}
		}
		c.properties(ctx, t, id)
	}
	return id
}

func (c *config) blocked(ctx context.Context, t *asynq.Task, res ratelimit.Result) error {
	err := &RateLimitError{Limiter: res.Limiter}
	if res.Rule != nil {
		err.Rule = res.Rule.Name
	}
	var reset time.Time
	if res.Info != nil {
		reset = res.Info.ResetAt
	}
	err.RetryIn = retryIn(c.now(), reset)
	if c.jitter >= time.Second {
		err.RetryIn += time.Duration(rand.Int64N(int64(c.jitter/time.Second)+1)) * time.Second
	}
	if c.deny != nil {
		return c.deny(ctx, t, res, err)
	}
	return err
}

// retryIn returns the whole number of seconds from now until reset, counted on
// Unix-second boundaries. asynq stores a retry's due time as whole Unix seconds
// (rounded down) and forwards the task once that second begins; with
// ceil(reset) - floor(now) seconds the due second is never before reset, so
// the retried task never meets the same window again. At least one second.
func retryIn(now, reset time.Time) time.Duration {
	due := reset.Unix()
	if reset.Nanosecond() != 0 {
		due++
	}
	secs := due - now.Unix()
	if secs < 1 {
		secs = 1
	}
	return time.Duration(secs) * time.Second
}
