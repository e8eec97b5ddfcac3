package redisstore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when goroutines outlive them: a Store
// from Dial starts some (its connection attempts, the combiner's sends, a
// Cluster's slot table refreshes), and Close must end them all.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		rueidisDelay,
		// rueidis closes the connections of nodes that left a Cluster's
		// topology 5s later, on a goroutine of its own (cluster.go, _refresh),
		// whether or not the client is closed meanwhile.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		// The breaker's prober outlives the checks by design (see core).
		goleak.IgnoreAnyFunction("github.com/ratekit/ratekit/core.(*Limiter).probeLoop"),
	)
}
