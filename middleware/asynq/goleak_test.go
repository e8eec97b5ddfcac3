package ratelimitasynq

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when goroutines outlive them: the tests
// run real asynq servers and clients, whose workers must all have stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// A limiter whose store went down opens its breaker, whose prober is
		// meant to outlive the check that started it (until a probe succeeds
		// or a minute passes with no check asking).
		goleak.IgnoreAnyFunction("github.com/ratekit/ratekit/core.(*Limiter).probeLoop"),
	)
}
