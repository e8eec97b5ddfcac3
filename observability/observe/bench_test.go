package observe_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observability/observe"
)

// BenchmarkCheck measures what each observer adds to a Check on the memory
// store (three counting rules evaluated per check). The _parallel rows run
// concurrent callers, each its own counters, so that they measure the
// observer's contention and not the store's (run them with -cpu 2,8,16).
func BenchmarkCheck(b *testing.B) {
	for _, bc := range []struct {
		name     string
		obs      func(context.Context, ratelimit.Event)
		parallel bool
	}{
		{"none", nil, true},
		{"metrics", observe.NewMetrics(observe.MetricsOptions{}).Observe, true},
		{"tracing_no_span", observe.NewTracing().Observe, false},
		{"block_summary", observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: slog.New(slog.DiscardHandler)}).Observe, false},
		{"all", observe.Multi(observe.NewMetrics(observe.MetricsOptions{}), observe.NewTracing(),
			observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: slog.New(slog.DiscardHandler)})), false},
	} {
		l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: ratelimit.NewMemoryStore(), Rules: testRules(), Observer: bc.obs})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		id := func(user string) ratelimit.Identifier {
			return ratelimit.Identifier{"ip": "10.0.0.1", "kind": "api", "user": user, "path": "/a"}
		}
		b.Run(bc.name, func(b *testing.B) {
			id := id("u1")
			b.ReportAllocs()
			for b.Loop() {
				l.Check(ctx, id)
			}
		})
		if !bc.parallel {
			continue
		}
		b.Run(bc.name+"_parallel", func(b *testing.B) {
			var callers atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				id := id("p" + strconv.FormatInt(callers.Add(1), 10))
				for pb.Next() {
					l.Check(ctx, id)
				}
			})
		})
	}
}
