package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

func Example() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "http_request",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{
			Name:            "authenticated_api",
			Characteristics: []string{"user"},
			Limit:           2,
			Period:          time.Minute,
			Action:          ratelimit.ActionLimit,
		}},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		r := limiter.Check(ctx, ratelimit.Identifier{"user": "user:123", "request_type": "api"})
		fmt.Println(r.Action, r.Rule.Name, r.Info.Remaining)
	}
	// Output:
	// allow authenticated_api 1
	// allow authenticated_api 0
	// block authenticated_api 0
}

// A ban keeps blocking after the window, and Clear lifts it after a success.
func ExampleLimiter_Clear() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "user_sign_in",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{
			Name:            "failed_logins_by_ip",
			Characteristics: []string{"ip"},
			Limit:           1,
			Period:          time.Minute,
			BanFor:          15 * time.Minute,
		}},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	id := ratelimit.Identifier{"ip": "203.0.113.42"}
	limiter.Check(ctx, id)
	r := limiter.Check(ctx, id)
	fmt.Println(r.Action, r.Info.Banned)
	n, err := limiter.Clear(ctx, id) // the login succeeded
	if err != nil {
		panic(err)
	}
	fmt.Println("cleared", n)
	fmt.Println(limiter.Peek(ctx, id).Action)
	// Output:
	// block true
	// cleared 2
	// allow
}

// A log rule tests a tighter threshold in shadow mode: it reports Exceeded but
// never blocks, and the enforcing rule after it keeps counting.
func ExampleActionLog() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "api",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{
			{Name: "tighter_trial", Action: ratelimit.ActionLog, Characteristics: []string{"user"},
				Limit: 1, Period: time.Minute},
			{Name: "current", Characteristics: []string{"user"},
				Limit: 100, Period: time.Minute},
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	limiter.Check(ctx, ratelimit.Identifier{"user": "u"})
	r := limiter.Check(ctx, ratelimit.Identifier{"user": "u"})
	fmt.Println(r.Action, r.Exceeded, r.Rule.Name, r.Enforcing().Rule.Name)
	// Output: allow true tighter_trial current
}

// Costs known only after the work: peek first ("already over budget?"), then
// charge what was used.
func ExampleCost() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "db_utilization",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "db_seconds_per_namespace", Characteristics: []string{"root_namespace"},
			Limit: 300, Period: time.Minute}},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	id := ratelimit.Identifier{"root_namespace": 345}
	if limiter.Peek(ctx, id, ratelimit.Cost(0)).Action == ratelimit.ActionBlock {
		return // over budget: reject before doing the work
	}
	dbSeconds := 0.75 // measured while serving the request
	r := limiter.Check(ctx, id, ratelimit.Cost(dbSeconds))
	fmt.Println(r.Action, r.Info.Count, r.Info.Remaining)
	// Output: allow 0.75 299.25
}

// Limits held by the application are resolved on every check.
func ExampleRule_limitFunc() {
	settings := struct{ autocompleteLimit int64 }{autocompleteLimit: 1}
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "autocomplete_users",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{
			Name:            "limit_user_autocompletes_by_user",
			Characteristics: []string{"user"},
			LimitFunc:       func(context.Context) (int64, error) { return settings.autocompleteLimit, nil },
			Period:          time.Minute,
		}},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	id := ratelimit.Identifier{"user": 42}
	limiter.Check(ctx, id)
	fmt.Println(limiter.Check(ctx, id).Action)
	settings.autocompleteLimit = 10
	fmt.Println(limiter.Check(ctx, id).Action)
	// Output:
	// block
	// allow
}
