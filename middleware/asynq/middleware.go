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

// CostFunc returns what a task cost once its handler has returned (err is the
// handler's error, m the task's meter). 0 charges nothing.
type CostFunc func(ctx context.Context, t *asynq.Task, m *ratelimit.Meter, err error) float64

// Option configures Middleware.
type Option func(*config)

type deferred struct {
	l        *ratelimit.Limiter
	peekCost float64
	cost     CostFunc
}

type config struct {
	limiters   []*ratelimit.Limiter
	deferred   []deferred
	identify   func(ctx context.Context, t *asynq.Task) ratelimit.Identifier
	properties func(ctx context.Context, t *asynq.Task, id ratelimit.Identifier)
	skip       func(ctx context.Context, t *asynq.Task) bool
	cost       func(ctx context.Context, t *asynq.Task) float64
	deny       DenyFunc
	jitter     time.Duration
	now        func() time.Time
}

// WithLimiter adds limiters, checked in order after the first one. The first
// limiter that blocks ends the check: later limiters are not counted.
func WithLimiter(limiters ...*ratelimit.Limiter) Option {
	return func(c *config) { c.limiters = append(c.limiters, limiters...) }
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

// WithMeteredLimiter adds a resource limiter charged with what the task
// measured (source design §1.11): the handler runs with a ratelimit.Meter in
// its context, code adds to it with ratelimit.AddCost(ctx, name, v), and after
// the handler the limiter is checked with the meter's value of name. Before
// the handler it is peeked: a task whose scope (say, its tenant) is already
// over budget is not run but retried after the reset, like any blocked task.
func WithMeteredLimiter(l *ratelimit.Limiter, name string) Option {
	return WithCostLimiter(l, 0, func(_ context.Context, _ *asynq.Task, m *ratelimit.Meter, _ error) float64 {
		return m.Value(name)
	})
}

// WithOutcomeLimiter adds a limiter that counts only the tasks for which count
// returns true once the handler has returned (for example tasks that failed
// against a flaky partner API). Before the handler it is peeked as if the task
// would count, so a limit of 5 lets 5 counted tasks run per window.
func WithOutcomeLimiter(l *ratelimit.Limiter, count func(ctx context.Context, t *asynq.Task, err error) bool) Option {
	if count == nil {
		panic("ratelimitasynq: WithOutcomeLimiter: nil count function")
	}
	return WithCostLimiter(l, 1, func(ctx context.Context, t *asynq.Task, _ *ratelimit.Meter, err error) float64 {
		if count(ctx, t, err) {
			return 1
		}
		return 0
	})
}

// WithCostLimiter is the general form of WithMeteredLimiter and
// WithOutcomeLimiter: l is peeked with peekCost before the handler (a blocked
// peek blocks the task) and checked with cost(...) after it.
func WithCostLimiter(l *ratelimit.Limiter, peekCost float64, cost CostFunc) Option {
	return func(c *config) { c.deferred = append(c.deferred, deferred{l: l, peekCost: peekCost, cost: cost}) }
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
// with WithLimiter) before each task. A blocked task is not run: the middleware
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
// When the store fails (the check fails open) the task runs. Log rules
// (shadow mode) never block. Middleware panics if a limiter is nil: that is a
// programming error found at start-up.
func Middleware(limiter *ratelimit.Limiter, opts ...Option) asynq.MiddlewareFunc {
	c := &config{limiters: []*ratelimit.Limiter{limiter}, now: time.Now}
	for _, o := range opts {
		o(c)
	}
	for _, l := range c.limiters {
		if l == nil {
			panic("ratelimitasynq: Middleware: nil limiter")
		}
	}
	for _, d := range c.deferred {
		if d.l == nil || d.cost == nil {
			panic("ratelimitasynq: WithCostLimiter: nil limiter or cost function")
		}
	}
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			if c.skip != nil && c.skip(ctx, t) {
				return next.ProcessTask(ctx, t)
			}
			id := c.identifier(ctx, t)
			// Peeks first: they count nothing, so a task they block is not
			// charged to the counting limiters.
			for _, d := range c.deferred {
				if res := d.l.Peek(ctx, id, ratelimit.Cost(d.peekCost)); res.Blocked() {
					return c.blocked(ctx, t, res)
				}
			}
			var opts []ratelimit.CheckOption
			if c.cost != nil {
				opts = append(opts, ratelimit.Cost(c.cost(ctx, t)))
			}
			for _, l := range c.limiters {
				if res := l.Check(ctx, id, opts...); res.Blocked() {
					return c.blocked(ctx, t, res)
				}
			}
			if len(c.deferred) == 0 {
				return next.ProcessTask(ctx, t)
			}
			ctx, m := ratelimit.WithMeter(ctx)
			err := next.ProcessTask(ctx, t)
			c.after(ctx, t, id, m, err)
			return err
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

// after charges the cost limiters. The work is done, so it is charged even if
// the task's context has been cancelled (a deadline, a shutdown).
func (c *config) after(ctx context.Context, t *asynq.Task, id ratelimit.Identifier, m *ratelimit.Meter, err error) {
	ctx = context.WithoutCancel(ctx)
	for _, d := range c.deferred {
		if cost := d.cost(ctx, t, m, err); cost > 0 {
			d.l.Check(ctx, id, ratelimit.Cost(cost))
		}
	}
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
