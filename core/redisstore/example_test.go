package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
)

// A limiter whose counters live in Redis, shared by every process of the
// fleet. (It needs a server on localhost:6379, so it is not run as a test.)
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()

	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "http_request",
		Store: redisstore.New(client),
		Rules: []ratelimit.Rule{{
			Name:            "authenticated_api",
			Characteristics: []string{"user"},
			Limit:           200,
			Period:          time.Minute,
			Action:          ratelimit.ActionLimit,
		}},
	})
	if err != nil {
		panic(err)
	}
	result := limiter.Check(context.Background(), ratelimit.Identifier{"user": "user:123"})
	if result.Blocked() {
		fmt.Println("429, retry after", result.Info.RetryAfter(time.Now()))
		return
	}
	fmt.Println(result.Action)
}

// On Redis Cluster the rules of a check are grouped by hash slot, one script
// per slot, sent as one pipeline: one round trip, unless a limit rule is
// followed by a rule of another slot (see "Redis Cluster and Ring" in the
// package doc).
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
	})
	defer client.Close()
	store := redisstore.New(client) // cluster mode detected from the client type
	_ = store
}

// With many checks in flight per process, go-redis' AutoPipeliner sends the
// checks of concurrent callers together, in one pipeline per batch. The
// store spreads a cluster's keys by slot as it does for the cluster client.
func ExampleNew_autoPipeline() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
	})
	defer client.Close()
	ap, err := client.AutoPipeline() // shared by the client, closed with it
	if err != nil {
		panic(err)
	}
	store := redisstore.New(ap)
	_ = store
}

// A client whose type hides a cluster (a wrapper) counts as one server until
// Redis answers a check CROSSSLOT; forcing the mode spares that answer.
func ExampleWithClusterMode() {
	client := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:         []string{"10.0.0.1:6379"},
		IsClusterMode: true,
	})
	defer client.Close()
	store := redisstore.New(instrumented{client}, redisstore.WithClusterMode(true))
	_ = store
}

// instrumented stands for a user's wrapper around a go-redis client.
type instrumented struct{ redis.UniversalClient }
