package ratelimittest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ratelimittest"
)

// A test moves the clock past the window instead of sleeping, and reads the
// count of a rule for an identifier.
func Example() {
	clock := ratelimittest.NewClock(time.Time{})
	store := ratelimittest.NewStore(clock)
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "api",
		Store: store,
		Now:   clock.Now,
		Rules: []ratelimit.Rule{{Name: "per_user", Characteristics: []string{"user"}, Limit: 2, Period: time.Minute}},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	alice := ratelimit.Identifier{"user": "alice"}
	for range 3 {
		fmt.Println(limiter.Check(ctx, alice).Action)
	}
	fmt.Println("count", store.RuleCount(limiter, "per_user", alice))

	clock.Advance(time.Minute) // the window ends
	fmt.Println("count", store.RuleCount(limiter, "per_user", alice))
	fmt.Println(limiter.Check(ctx, alice).Action)
	// Output:
	// allow
	// allow
	// block
	// count 3
	// count 0
	// allow
}

// FailWith makes the store fail as a Redis that is down would: the limiter
// fails open and reports the error.
func ExampleStore_FailWith() {
	store := ratelimittest.NewStore(nil)
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "api",
		Store: store,
		Now:   store.Clock().Now,
		Rules: []ratelimit.Rule{{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 10, Period: time.Second}},
	})
	if err != nil {
		panic(err)
	}
	store.FailWith(errors.New("connection refused"))
	r := limiter.Check(context.Background(), ratelimit.Identifier{"ip": "192.0.2.1"})
	fmt.Println(r.Action, r.Failed(), r.Remaining(), r.RuleName() == "")
	// Output:
	// allow true 0 true
}

// A ban outlives its window; the clock moves past it.
func ExampleStore_RuleBanned() {
	store := ratelimittest.NewStore(nil)
	rule := ratelimit.Rule{Name: "logins", Characteristics: []string{"ip"}, Limit: 1, Period: time.Minute}
	rule.BanFor = 15 * time.Minute
	limiter, err := ratelimit.New(ratelimit.Config{Name: "sign_in", Store: store, Now: store.Clock().Now, Rules: []ratelimit.Rule{rule}})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	ip := ratelimit.Identifier{"ip": "203.0.113.7"}
	limiter.Check(ctx, ip)
	limiter.Check(ctx, ip)
	fmt.Println(store.RuleBanned(limiter, "logins", ip))
	store.Clock().Advance(10 * time.Minute)
	fmt.Println(store.RuleBanned(limiter, "logins", ip), limiter.Check(ctx, ip).Action)
	store.Clock().Advance(5 * time.Minute)
	fmt.Println(store.RuleBanned(limiter, "logins", ip), limiter.Check(ctx, ip).Action)
	// Output:
	// true
	// true block
	// false allow
}
