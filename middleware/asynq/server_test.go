package ratelimitasynq

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
)

const taskType = "ratekit:test"

// attempt is one check of a task, seen by the limiter's observer.
type attempt struct {
	at      time.Time
	blocked bool
	reset   time.Time
}

// attempts records every check per task ID (the middleware checks with the
// server's task context, so the observer can read the ID from it).
type attempts struct {
	mu sync.Mutex
	m  map[string][]attempt
}

func (a *attempts) Observe(ctx context.Context, e ratelimit.Event) {
	id, ok := asynq.GetTaskID(ctx)
	if !ok || e.Result == nil {
		return
	}
	at := attempt{at: time.Now(), blocked: e.Result.Blocked()}
	if e.Result.Info != nil {
		at.reset = e.Result.Info.ResetAt
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string][]attempt{}
	}
	a.m[id] = append(a.m[id], at)
}

func (a *attempts) of(id string) []attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]attempt(nil), a.m[id]...)
}

type harness struct {
	opt       asynq.RedisConnOpt
	queue     string
	client    *asynq.Client
	inspector *asynq.Inspector
}

// newHarness connects asynq to the test Redis with a queue of the test's own.
func newHarness(t *testing.T) *harness {
	t.Helper()
	opt, err := asynq.ParseRedisURI(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{opt: opt, queue: "rk_" + strings.NewReplacer(":", "_").Replace(redistest.Prefix(t)),
		client: asynq.NewClient(opt), inspector: asynq.NewInspector(opt)}
	t.Cleanup(func() {
		_ = h.inspector.DeleteQueue(h.queue, true)
		_ = h.client.Close()
		_ = h.inspector.Close()
	})
	return h
}

// serve runs an asynq server on the harness queue with the rate-limit
// middleware and the retry helpers; handled receives the IDs of tasks run.
func (h *harness) serve(t *testing.T, mw asynq.MiddlewareFunc, handled chan<- string) *asynq.Server {
	t.Helper()
	srv := asynq.NewServer(h.opt, asynq.Config{
		Queues:                   map[string]int{h.queue: 1},
		Concurrency:              2,
		IsFailure:                IsFailure,
		RetryDelayFunc:           RetryDelay,
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		TaskCheckInterval:        50 * time.Millisecond,
		ShutdownTimeout:          time.Second,
		LogLevel:                 asynq.ErrorLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(mw)
	mux.HandleFunc(taskType, func(ctx context.Context, _ *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		handled <- id
		return nil
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

func (h *harness) enqueue(t *testing.T, n int, opts ...asynq.Option) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		info, err := h.client.Enqueue(asynq.NewTask(taskType, []byte(fmt.Sprint(i))),
			append([]asynq.Option{asynq.Queue(h.queue), asynq.Retention(time.Minute)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = info.ID
	}
	return ids
}

func waitHandled(t *testing.T, handled <-chan string, n int, within time.Duration) []string {
	t.Helper()
	var got []string
	timeout := time.After(within)
	for len(got) < n {
		select {
		case id := <-handled:
			got = append(got, id)
		case <-timeout:
			t.Fatalf("%d of %d tasks processed within %v", len(got), n, within)
		}
	}
	return got
}

// waitState polls the inspector until the task reaches state.
func (h *harness) waitState(t *testing.T, id string, state asynq.TaskState) *asynq.TaskInfo {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := h.inspector.GetTaskInfo(h.queue, id)
		if err == nil && info.State == state {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: state %v (err %v), want %v", id, info, err, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// redisJobsLimiter returns the "jobs" limiter on client, limit per period per
// task type and queue. Its timeout is 10s, not the default 100ms, which a
// loaded machine descheduling a check that long would hit: the checks on a
// working Redis must succeed, and a stopped one refuses at once.
func redisJobsLimiter(t *testing.T, client redis.UniversalClient, prefix string, obs func(context.Context, ratelimit.Event), limit int64, period time.Duration) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{Name: "jobs", Store: redisstore.New(client), KeyPrefix: prefix, Observer: obs, Logger: quiet, Timeout: 10 * time.Second,
		Rules: []ratelimit.Rule{rule("per_type", limit, period, ratelimit.ActionLimit, "task_type", "queue")}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Five tasks against a limit of 2 per second, each allowed a single retry
// (MaxRetry(1)): every task is eventually processed, blocked ones come back
// only after their window reset, and none has used its retry.
func TestServerRetriesAfterReset(t *testing.T) {
	h := newHarness(t)
	rec := &attempts{}
	l := redisJobsLimiter(t, redistest.Client(t), redistest.Prefix(t), rec.Observe, 2, time.Second)
	handled := make(chan string, 16)
	h.serve(t, Middleware(l), handled)

	ids := h.enqueue(t, 5, asynq.MaxRetry(1))
	waitHandled(t, handled, len(ids), 20*time.Second)

	blocks, blockedTwice := 0, 0
	for _, id := range ids {
		info := h.waitState(t, id, asynq.TaskStateCompleted)
		if info.Retried != 0 {
			t.Errorf("task %s: Retried = %d, want 0 (rate limiting must not use the retry budget)", id, info.Retried)
		}
		as := rec.of(id)
		if len(as) == 0 || as[len(as)-1].blocked {
			t.Fatalf("task %s: attempts %+v, want the last one allowed", id, as)
		}
		n := 0
		for i, a := range as[:len(as)-1] {
			if !a.blocked {
				t.Fatalf("task %s: allowed attempt %d was not the last: %+v", id, i, as)
			}
			n++
			if next := as[i+1].at; next.Before(a.reset) {
				t.Errorf("task %s: retried at %v, before its window reset at %v", id, next.Format(time.StampMilli), a.reset.Format(time.StampMilli))
			}
		}
		if n > 0 && !strings.Contains(info.LastErr, "rate limited by limiter jobs rule per_type") {
			t.Errorf("task %s: LastErr = %q, want the rate-limit error", id, info.LastErr)
		}
		blocks += n
		if n >= 2 {
			blockedTwice++
		}
	}
	if blocks < 3 {
		t.Fatalf("%d blocked attempts, want at least 3 (5 tasks, 2 per window)", blocks)
	}
	if blockedTwice == 0 {
		t.Fatal("no task was blocked twice; with MaxRetry(1) that is what shows the retry budget untouched")
	}
	t.Logf("5 tasks, %d blocked attempts, %d tasks blocked twice", blocks, blockedTwice)
}

// Two worker processes (two servers, two limiters, two store instances) share
// one limit through Redis: the second sees what the first counted.
func TestServerLimitIsGlobal(t *testing.T) {
	h := newHarness(t)
	prefix := redistest.Prefix(t)
	handled := make(chan string, 16)

	a := h.serve(t, Middleware(redisJobsLimiter(t, redistest.Client(t), prefix, nil, 2, time.Minute)), handled)
	h.enqueue(t, 2)
	waitHandled(t, handled, 2, 10*time.Second)
	a.Shutdown()

	b := h.serve(t, Middleware(redisJobsLimiter(t, redistest.Client(t), prefix, nil, 2, time.Minute)), handled)
	defer b.Shutdown()
	id := h.enqueue(t, 1)[0]
	info := h.waitState(t, id, asynq.TaskStateRetry)
	if info.Retried != 0 || !strings.Contains(info.LastErr, "rate limited by limiter jobs rule per_type") {
		t.Fatalf("task on the second worker: Retried %d, LastErr %q; want 0 and the rate-limit error", info.Retried, info.LastErr)
	}
	if d := time.Until(info.NextProcessAt); d < 50*time.Second || d > 62*time.Second {
		t.Fatalf("retry due in %v, want about a minute (the shared window's reset)", d)
	}
}

// A limiter whose Redis is down fails open: tasks run.
func TestServerFailOpen(t *testing.T) {
	h := newHarness(t)
	down := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: down.Addr})
	t.Cleanup(func() { _ = client.Close() })
	handled := make(chan string, 16)
	h.serve(t, Middleware(redisJobsLimiter(t, client, redistest.Prefix(t), nil, 1, time.Minute)), handled)

	first := h.enqueue(t, 1)
	waitHandled(t, handled, 1, 10*time.Second) // counted: the limit of 1 is used up
	down.Stop()
	ids := h.enqueue(t, 3)
	waitHandled(t, handled, 3, 10*time.Second)
	for _, id := range append(first, ids...) {
		if info := h.waitState(t, id, asynq.TaskStateCompleted); info.Retried != 0 || info.LastErr != "" {
			t.Fatalf("task %s: Retried %d, LastErr %q; want a clean run", id, info.Retried, info.LastErr)
		}
	}
}

// The documented caveat: asynq archives a task whose retries are exhausted
// before it asks IsFailure, so a MaxRetry(0) task is archived when blocked.
func TestServerMaxRetryZeroIsArchived(t *testing.T) {
	h := newHarness(t)
	handled := make(chan string, 16)
	h.serve(t, Middleware(redisJobsLimiter(t, redistest.Client(t), redistest.Prefix(t), nil, 1, time.Minute)), handled)
	ids := h.enqueue(t, 2, asynq.MaxRetry(0))
	first := waitHandled(t, handled, 1, 10*time.Second)[0]
	other := ids[0]
	if other == first {
		other = ids[1]
	}
	info := h.waitState(t, other, asynq.TaskStateArchived)
	if !strings.Contains(info.LastErr, "rate limited") {
		t.Fatalf("archived task LastErr %q", info.LastErr)
	}
}
