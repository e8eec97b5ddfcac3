package debug_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when goroutines outlive them: the page's
// handlers and the observers they read run on request goroutines that must
// all end with the test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// An open breaker's prober outlives the check that started it by
		// design (until a probe succeeds, or a minute without checks).
		goleak.IgnoreAnyFunction("github.com/ratekit/ratekit/core.(*Limiter).probeLoop"),
	)
}
