package ratekitenvoy_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when goroutines outlive them: the gRPC
// server and the limiters behind it start goroutines, and a stopped server
// must leave none behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// An open breaker's prober outlives the check that started it by
		// design (until a probe succeeds, or a minute without checks).
		goleak.IgnoreAnyFunction("github.com/ratekit/ratekit/core.(*Limiter).probeLoop"),
		// A Cluster client of redisstore.Dial closes the connections that a
		// topology refresh replaced 5s later, even after Close.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	)
}
