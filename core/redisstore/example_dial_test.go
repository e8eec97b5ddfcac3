package redisstore_test

import (
	"context"
	"fmt"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
)

// A limiter on Redis through the store's rueidis client: the same call takes
// a Cluster's nodes or a Sentinel master's URL. (It needs a server on
// localhost:6379, so it is not run as a test.)
func ExampleDial() {
	ctx := context.Background()
	store, err := redisstore.Dial(ctx, "redis://localhost:6379/0")
	if err != nil {
		panic(err) // a malformed URL; the error never contains it (it may hold a password)
	}
	defer store.Close()

	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "http_request",
		Store: store,
		Rules: []ratelimit.Rule{{Name: "authenticated_api", Characteristics: []string{"user"}, Limit: 200, Period: time.Minute}},
	})
	if err != nil {
		panic(err)
	}
	result := limiter.Check(ctx, ratelimit.Identifier{"user": "user:123"})
	if result.Blocked() {
		fmt.Println("429, retry after", result.Info.RetryAfter(time.Now()))
		return
	}
	fmt.Println(result.Action)
}

// A service that must not start without Redis requires a connection; the
// options are rueidis' own, here with TLS and ACL credentials.
func ExampleOpen() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opt, err := redisstore.ParseURL("rediss://limiter:secret@redis.internal:6380")
	if err != nil {
		panic(err)
	}
	store, err := redisstore.Open(ctx, redisstore.Options{Client: opt, RequireConnection: true})
	if err != nil {
		panic(err) // unreachable, wrong password: the URL is never shown
	}
	defer store.Close()
}
