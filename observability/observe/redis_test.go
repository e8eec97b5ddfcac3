package observe_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
)

// unreachableRedis is a real Redis client of a port where nothing listens,
// without retries, so that every check fails open at once.
func unreachableRedis(t *testing.T) ratelimit.Store {
	c := redis.NewClient(&redis.Options{Addr: redistest.UnusedAddr(t), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return redisstore.New(c)
}

// redisKind runs the tests on a real Redis reached by client.
func redisKind(name string, client func(testing.TB) redisstore.Client) storeKind {
	return storeKind{
		name:    name,
		store:   func(t *testing.T) (ratelimit.Store, string) { return redisstore.New(client(t)), redistest.Prefix(t) },
		broken:  unreachableRedis,
		errType: "*net.OpError",
	}
}

// storeKinds are the backends of the table tests: the memory store, and the
// real Redis and Redis Cluster (skipped, saying how to run them, when the test
// servers are not configured).
func storeKinds() []storeKind {
	return []storeKind{
		memoryKind,
		redisKind("redis", func(t testing.TB) redisstore.Client { return redistest.Client(t) }),
		redisKind("cluster", func(t testing.TB) redisstore.Client { return redistest.ClusterClient(t) }),
	}
}
