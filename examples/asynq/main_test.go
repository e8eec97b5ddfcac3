package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
