package ratelimit_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when goroutines outlive them: the limiter
// starts goroutines (a store call it stops waiting for, the breaker's prober)
// and none may be left behind for good.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// An open breaker's prober is meant to outlive the check that started
		// it: it runs until a probe succeeds or a minute passes with no check
		// asking, so tests that open a breaker leave one behind by design.
		goleak.IgnoreAnyFunction("github.com/ratekit/ratekit/core.(*Limiter).probeLoop"),
	)
}
