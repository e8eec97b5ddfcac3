package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/internal/redistest"
)

func TestRun(t *testing.T) {
	prefix := redistest.Prefix(t)
	var out strings.Builder
	o := options{
		redisURL:  redistest.URL(t),
		queue:     "rk_example_" + strings.NewReplacer(":", "_").Replace(prefix),
		tasks:     5,
		limit:     2,
		period:    time.Second,
		timeout:   30 * time.Second,
		keyPrefix: prefix,
		obs:       exampleutil.NewObservability(),
		// Every check must be answered for the counts below.
		checkTimeout: exampleutil.TestCheckTimeout,
		// The metrics listener bounds headers as every ratekit listener.
		metricsAddr:  "127.0.0.1:0",
		metricsReady: func(a net.Addr) { exampleutil.HeadersBounded(t, "http://"+a.String()) },
	}
	st, err := run(context.Background(), o, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	// 5 tasks, 2 per window: 3 are blocked in the first window, and at least
	// one of them again in the second; every blocked task with MaxRetry(3) is
	// still processed, and none used a retry.
	if st.processed != 5 || st.blocked < 4 || st.retried != 0 {
		t.Fatalf("stats %+v, want 5 processed, >= 4 blocked, 0 retried\n%s", st, out.String())
	}
	for _, want := range []string{"blocked by jobs/per_task_type, retry in", "attempt 2: processed", "all 5 tasks processed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// Every attempt went through the limiter's observer: the example's /metrics
	// counts the processed ones as allowed and each turned-away attempt as a block.
	mux := http.NewServeMux()
	o.obs.Mount(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`ratelimit_checks_total{action="allow",error="false",matched="true",rate_limiter="jobs"} 5`,
		fmt.Sprintf(`ratelimit_checks_total{action="block",error="false",matched="true",rate_limiter="jobs"} %d`, st.blocked),
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, rec.Body.String())
		}
	}
	t.Log("\n" + out.String())
}

func TestRunBadInput(t *testing.T) {
	for _, o := range []options{
		{redisURL: "redis://127.0.0.1:1", tasks: 0, limit: 1, period: time.Second},
		{redisURL: "redis://127.0.0.1:1", tasks: 1, limit: 1, period: time.Millisecond},
		{redisURL: "::not a url", tasks: 1, limit: 1, period: time.Second},
		{redisURL: "redis://" + redistest.UnusedAddr(t), tasks: 1, limit: 1, period: time.Second},
	} {
		if _, err := run(context.Background(), o, &strings.Builder{}); err == nil {
			t.Errorf("run(%+v) succeeded, want an error", o)
		}
	}
}

// SIGTERM, what a supervisor (systemd, Kubernetes, timeout) stops a program
// with, stops the example as an interrupt does: it deletes its queue, so that
// the tasks it left waiting for their retry are not run by a later run.
func TestSIGTERMDeletesQueue(t *testing.T) {
	rdb := redistest.Client(t)
	bin := filepath.Join(t.TempDir(), "asynq")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	queue := "rk_example_" + strings.NewReplacer(":", "_").Replace(redistest.Prefix(t))
	// One task a minute: the others wait in the retry set when SIGTERM comes.
	cmd := exec.Command(bin, "-tasks", "3", "-limit", "1", "-period", "1m", "-queue", queue, "-check-timeout", exampleutil.TestCheckTimeout.String())
	cmd.Env = append(os.Environ(), "REDIS_URL="+redistest.URL(t))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // what a failed run leaves, and the counter of this queue's rule until its window ends
		_ = asynq.NewInspectorFromRedisClient(rdb).DeleteQueue(queue, true)
		if keys, _ := rdb.Keys(context.Background(), exampleutil.KeyPrefix+"*"+queue+"*").Result(); len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	outc := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(stdout)
		outc <- string(b)
	}()
	// SIGTERM once the blocked tasks wait in the retry set, none active.
	retry := "asynq:{" + queue + "}:retry"
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n, err := rdb.ZCard(context.Background(), retry).Result(); err != nil {
			t.Fatal(err)
		} else if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			out := <-outc
			_ = cmd.Wait()
			t.Fatalf("2 blocked tasks not in %s within 30s:\n%s%s", retry, out, stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	out := <-outc
	_ = cmd.Wait() // stopped by the signal: not a success, whatever the exit
	queues, err := rdb.SMembers(context.Background(), "asynq:queues").Result()
	if err != nil {
		t.Fatal(err)
	}
	retries, err := rdb.ZCard(context.Background(), retry).Result()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(queues, queue) || retries > 0 {
		t.Errorf("after SIGTERM the queue %s is still listed (%v) with %d tasks waiting for their retry, want it deleted\n%s%s", queue, slices.Contains(queues, queue), retries, out, stderr.String())
	}
}
