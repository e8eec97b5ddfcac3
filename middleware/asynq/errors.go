package ratelimitasynq

import (
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// RateLimitError is returned by the middleware instead of running a task that a
// limiter blocked. Pair it with IsFailure and RetryDelay in asynq.Config so the
// task is retried after the window resets without using up its retry budget.
type RateLimitError struct {
	// RetryIn is how long to wait before running the task again: a whole
	// number of seconds, counted so that asynq (which schedules retries at
	// whole Unix seconds) never hands the task back before the limit resets;
	// a reset beyond the longest Duration (292 years) is told as that.
	RetryIn time.Duration
	// Limiter and Rule name the limiter and rule that blocked the task.
	Limiter string
	Rule    string
	// Never reports that the task's cost alone is over the rule
	// (ratelimit.Info.Never): no wait lets it run, so the error wraps
	// asynq.SkipRetry and asynq archives the task rather than retry it
	// every window for good.
	Never bool
}

func (e *RateLimitError) Error() string {
	if e.Never {
		return fmt.Sprintf("ratelimitasynq: rate limited by limiter %s rule %s by the task's cost alone, it can never run", e.Limiter, e.Rule)
	}
	return fmt.Sprintf("ratelimitasynq: rate limited by limiter %s rule %s, retry in %s", e.Limiter, e.Rule, e.RetryIn)
}

// Unwrap returns asynq.SkipRetry when the task can never run (Never), so
// that asynq archives it; nil otherwise.
func (e *RateLimitError) Unwrap() error {
	if e.Never {
		return asynq.SkipRetry
	}
	return nil
}

// AsRateLimitError returns the *RateLimitError in err's chain, if any.
func AsRateLimitError(err error) (*RateLimitError, bool) {
	var rl *RateLimitError
	if errors.As(err, &rl) && rl != nil {
		return rl, true
	}
	return nil, false
}

// IsFailure is an asynq.Config.IsFailure function: a rate-limit error is not a
// failure, so asynq neither increments the task's Retried count nor records it
// as failed; any other non-nil error is.
func IsFailure(err error) bool {
	if err == nil {
		return false
	}
	_, limited := AsRateLimitError(err)
	return !limited
}

// RetryDelay is an asynq.Config.RetryDelayFunc: RetryIn for a rate-limit
// error, asynq.DefaultRetryDelayFunc for anything else.
func RetryDelay(n int, err error, t *asynq.Task) time.Duration {
	return RetryDelayFunc(asynq.DefaultRetryDelayFunc)(n, err, t)
}

// RetryDelayFunc is RetryDelay with another delay function for errors that
// are not rate-limit errors (nil means asynq.DefaultRetryDelayFunc).
func RetryDelayFunc(fallback asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	if fallback == nil {
		fallback = asynq.DefaultRetryDelayFunc
	}
	return func(n int, err error, t *asynq.Task) time.Duration {
		if rl, ok := AsRateLimitError(err); ok {
			return rl.RetryIn
		}
		return fallback(n, err, t)
	}
}
