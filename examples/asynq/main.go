// The asynq example: tasks enqueued faster than a rule allows. The rate-limit
// middleware turns away the excess, asynq retries each of them after the
// window resets, without using up its retries or counting it as failed, and
// the program exits when every task has been processed.
//
//	go run ./examples/asynq                               # Redis at REDIS_URL, else localhost:6379
//	go run ./examples/asynq -addr 127.0.0.1:6380 -tasks 10 -limit 3 -period 2s
//
// asynq itself needs Redis, so the limiter keeps its counters there too
// (redisstore): every worker process shares the limit. The example uses its own
// queue (-queue) and deletes it at the end.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hibiken/asynq"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/httpguard"
	ratelimitasynq "github.com/ratekit/ratekit/middleware/asynq"
)

const taskType = "report:generate"

type options struct {
	redisURL  string
	queue     string
	tasks     int
	limit     int64
	period    time.Duration
	timeout   time.Duration
	keyPrefix string // counter key prefix ("" for the default; tests set their own)

	checkTimeout time.Duration // bounds each check on Redis before it fails open (0 for ratelimit.DefaultTimeout; -check-timeout)

	metricsAddr  string                     // HTTP address of /metrics and /debug/ratelimit during the run ("" for none)
	metricsReady func(net.Addr)             // told metricsAddr's bound address once it serves (tests)
	obs          *exampleutil.Observability // nil: run makes its own
}

type stats struct {
	processed int // tasks run to completion
	blocked   int // attempts turned away by the limiter
	retried   int // asynq's Retried counts summed: 0, since a rate limit is no failure
}

func main() {
	o := options{redisURL: os.Getenv("REDIS_URL")}
	addr := flag.String("addr", "", "Redis host:port (default: REDIS_URL, else localhost:6379)")
	flag.StringVar(&o.queue, "queue", "ratekit_example", "asynq queue used (and deleted at the end)")
	flag.IntVar(&o.tasks, "tasks", 6, "tasks to enqueue at once")
	flag.Int64Var(&o.limit, "limit", 2, "tasks allowed per period")
	flag.DurationVar(&o.period, "period", 2*time.Second, "rate-limit window")
	flag.DurationVar(&o.timeout, "timeout", time.Minute, "give up after this long")
	exampleutil.CheckTimeoutFlag(&o.checkTimeout)
	flag.StringVar(&o.metricsAddr, "metrics-addr", "", `serve /metrics and /debug/ratelimit here during the run ("" for none)`)
	flag.Parse()
	switch {
	case *addr != "":
		o.redisURL = "redis://" + *addr
	case o.redisURL == "":
		o.redisURL = "redis://localhost:6379"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, o, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, o options, out io.Writer) (stats, error) {
	var st stats
	if o.tasks < 1 || o.limit < 1 || o.period < time.Second {
		return st, fmt.Errorf("want -tasks >= 1, -limit >= 1 and -period >= 1s (asynq retries at whole seconds)")
	}
	rdb, err := exampleutil.NewRedisClient(ctx, o.redisURL)
	if err != nil {
		return st, fmt.Errorf("asynq needs Redis: %w", err)
	}
	defer rdb.Close()

	obs := o.obs
	if obs == nil {
		obs = exampleutil.NewObservability()
	}
	// OpenTelemetry traces and metrics when OTEL_EXPORTER_OTLP_ENDPOINT is set.
	stopOTel, err := obs.StartOTel(ctx, "ratekit_example_asynq")
	if err != nil {
		return st, err
	}
	defer func() { _ = stopOTel(context.Background()) }()
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:      "jobs",
		Store:     redisstore.New(rdb),
		KeyPrefix: cmp.Or(o.keyPrefix, exampleutil.KeyPrefix), // `ratekit --service examples`
		Timeout:   o.checkTimeout,
		Observer:  obs.Observer(),
		Rules: []ratelimit.Rule{{
			Name:            "per_task_type",
			Characteristics: []string{identifiers.TaskType, identifiers.Queue},
			Limit:           o.limit,
			Period:          o.period,
		}},
	})
	if err != nil {
		return st, fmt.Errorf("limiter: %w", err)
	}

	if o.metricsAddr != "" {
		mux := http.NewServeMux()
		obs.Mount(mux, limiter)
		lis, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			return st, fmt.Errorf("listen %s: %w", o.metricsAddr, err)
		}
		hs := httpguard.Server(mux) // timeouts and a header bound, as every ratekit listener
		go func() { _ = hs.Serve(lis) }()
		defer hs.Close()
		fmt.Fprintf(out, "metrics at http://%s/metrics, debug page at http://%s/debug/ratelimit\n", lis.Addr(), lis.Addr())
		if o.metricsReady != nil {
			o.metricsReady(lis.Addr())
		}
	}

	start := time.Now()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%+6.1fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	attempts := map[string]int{}
	attempt := func(t *asynq.Task) int {
		mu.Lock()
		defer mu.Unlock()
		attempts[string(t.Payload())]++
		return attempts[string(t.Payload())]
	}

	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Queues:         map[string]int{o.queue: 1},
		Concurrency:    4,
		IsFailure:      ratelimitasynq.IsFailure,  // a rate limit is not a failure: Retried stays 0
		RetryDelayFunc: ratelimitasynq.RetryDelay, // come back when the window resets
		// asynq moves due retries back to the queue at this interval (default 5s).
		DelayedTaskCheckInterval: 200 * time.Millisecond,
		TaskCheckInterval:        100 * time.Millisecond,
		ShutdownTimeout:          2 * time.Second,
		LogLevel:                 asynq.WarnLevel,
	})
	done := make(chan struct{}, o.tasks)
	mux := asynq.NewServeMux()
	mux.Use(ratelimitasynq.Middleware(limiter,
		ratelimitasynq.WithDenyHandler(func(_ context.Context, t *asynq.Task, _ ratelimit.Result, err *ratelimitasynq.RateLimitError) error {
			n := attempt(t)
			mu.Lock()
			st.blocked++
			mu.Unlock()
			say("task %s attempt %d: blocked by %s/%s, retry in %s", t.Payload(), n, err.Limiter, err.Rule, err.RetryIn)
			return err
		})))
	mux.HandleFunc(taskType, func(ctx context.Context, t *asynq.Task) error {
		say("task %s attempt %d: processed", t.Payload(), attempt(t))
		done <- struct{}{}
		return nil
	})
	if err := srv.Start(mux); err != nil {
		return st, fmt.Errorf("asynq server: %w", err)
	}
	defer srv.Shutdown()

	client := asynq.NewClientFromRedisClient(rdb)
	inspector := asynq.NewInspectorFromRedisClient(rdb)
	defer func() { _ = inspector.DeleteQueue(o.queue, true) }()
	say("enqueueing %d tasks; the rule allows %d per %s", o.tasks, o.limit, o.period)
	ids := make([]string, o.tasks)
	for i := range ids {
		info, err := client.Enqueue(asynq.NewTask(taskType, []byte(strconv.Itoa(i+1))),
			asynq.Queue(o.queue), asynq.MaxRetry(3), asynq.Retention(time.Hour))
		if err != nil {
			return st, fmt.Errorf("enqueue: %w", err)
		}
		ids[i] = info.ID
	}

	timeout := time.After(o.timeout)
	for st.processed < o.tasks {
		select {
		case <-done:
			st.processed++
		case <-timeout:
			return st, fmt.Errorf("%d of %d tasks processed within %s", st.processed, o.tasks, o.timeout)
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
	for _, id := range ids {
		info, err := inspector.GetTaskInfo(o.queue, id)
		if err != nil {
			return st, fmt.Errorf("inspect task %s: %w", id, err)
		}
		st.retried += info.Retried
	}
	mu.Lock()
	blocked := st.blocked
	mu.Unlock()
	say("all %d tasks processed; %d attempts blocked and retried after the reset; asynq Retried total: %d (MaxRetry was 3)",
		st.processed, blocked, st.retried)
	return st, nil
}
