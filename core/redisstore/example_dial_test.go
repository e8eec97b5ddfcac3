package redisstore_test

import (
	"context"
	"fmt"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
)

// A limiter on a standalone Redis over the store's own pipelined
// connections. (It needs a server on localhost:6379, so it is not run as a
// test.)
func ExampleDial() {
	ctx := context.Background()
	store, err := redisstore.Dial(ctx, "redis://localhost:6379/0")
	if err != nil {
		panic(err) // the error never contains the URL, which may hold a password
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
