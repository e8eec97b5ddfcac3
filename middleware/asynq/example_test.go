package ratelimitasynq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/hibiken/asynq"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	ratelimitasynq "github.com/ratekit/ratekit/middleware/asynq"
)

// A limit of 2 tasks of a type per minute: the third is not run and returns a
// rate-limit error that asynq retries after the reset, without counting it as
// a failure.
func ExampleMiddleware() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "jobs",
		Store: ratelimit.NewMemoryStore(), // redisstore.New(client) for a limit shared by every worker
		Rules: []ratelimit.Rule{{
			Name:            "per_task_type",
			Characteristics: []string{identifiers.TaskType},
			Limit:           2,
			Period:          time.Minute,
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	send := asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		fmt.Println("sent")
		return nil
	})
	h := ratelimitasynq.Middleware(limiter)(send)
	for range 3 {
		err := h.ProcessTask(context.Background(), asynq.NewTask("email:send", nil))
		if rl, ok := ratelimitasynq.AsRateLimitError(err); ok {
			fmt.Printf("blocked by %s/%s, retry within a minute: %v, failure: %v\n",
				rl.Limiter, rl.Rule, rl.RetryIn <= 61*time.Second, ratelimitasynq.IsFailure(err))
		}
	}
	// Output:
	// sent
	// sent
	// blocked by jobs/per_task_type, retry within a minute: true, failure: false
}

// The server configuration that makes blocked tasks wait for the reset. (It
// needs a Redis on localhost:6379, so it is not run as a test;
// TestServerRetriesAfterReset runs this configuration.)
func ExampleMiddleware_server() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "jobs",
		Store: ratelimit.NewMemoryStore(), // redisstore.New(client) in production
		Rules: []ratelimit.Rule{{Name: "per_task_type", Characteristics: []string{identifiers.TaskType},
			Limit: 100, Period: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	redisOpt := asynq.RedisClientOpt{Addr: "localhost:6379"}
	srv := asynq.NewServer(redisOpt, asynq.Config{
		IsFailure:      ratelimitasynq.IsFailure,
		RetryDelayFunc: ratelimitasynq.RetryDelay,
		// Retried tasks are picked up every DelayedTaskCheckInterval (5s by default).
		DelayedTaskCheckInterval: time.Second,
	})
	mux := asynq.NewServeMux()
	mux.Use(ratelimitasynq.Middleware(limiter, ratelimitasynq.WithJitter(3*time.Second)))
	mux.HandleFunc("email:send", func(context.Context, *asynq.Task) error { return nil })
	if err := srv.Run(mux); err != nil { // until SIGTERM or SIGINT
		log.Fatal(err)
	}
}

func ExampleRetryDelay() {
	task := asynq.NewTask("email:send", nil)
	limited := fmt.Errorf("send: %w", &ratelimitasynq.RateLimitError{RetryIn: 7 * time.Second, Limiter: "jobs", Rule: "per_task_type"})
	fmt.Println(ratelimitasynq.RetryDelay(0, limited, task))
	other := ratelimitasynq.RetryDelay(0, errors.New("smtp down"), task)
	fmt.Println(other >= 15*time.Second) // asynq's default backoff
	fmt.Println(ratelimitasynq.IsFailure(limited), ratelimitasynq.IsFailure(errors.New("smtp down")))
	// Output:
	// 7s
	// true
	// false true
}
