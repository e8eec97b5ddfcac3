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
// store (three counting rules evaluated per check).
func BenchmarkCheck(b *testing.B) {
	for _, bc := range []struct {
		name string
		obs  func(context.Context, ratelimit.Event)
	}{
		{"none", nil},
		{"metrics", observe.NewMetrics(observe.MetricsOptions{}).Observe},
		{"tracing_no_span", observe.NewTracing().Observe},
		{"block_summary", observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: slog.New(slog.DiscardHandler)}).Observe},
		{"all", observe.Multi(observe.NewMetrics(observe.MetricsOptions{}), observe.NewTracing(),
			observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: slog.New(slog.DiscardHandler)}))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: ratelimit.NewMemoryStore(), Rules: testRules(), Observer: bc.obs})
			if err != nil {
				b.Fatal(err)
			}
			id := ratelimit.Identifier{"ip": "10.0.0.1", "kind": "api", "user": "u1", "path": "/a"}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l.Check(ctx, id)
			}
		})
	}
}

// BenchmarkCheckParallel is BenchmarkCheck's metrics row with concurrent
// callers (run it with -cpu 2,8,16 to see contention).
func BenchmarkCheckParallel(b *testing.B) {
	for _, bc := range []struct {
		name string
		obs  func(context.Context, ratelimit.Event)
	}{
		{"none", nil},
		{"metrics", observe.NewMetrics(observe.MetricsOptions{}).Observe},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: ratelimit.NewMemoryStore(), Rules: testRules(), Observer: bc.obs})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var callers atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				// Each caller its own counters: the observer's cost, not the store's lock.
				user := "u" + strconv.FormatInt(callers.Add(1), 10)
				id := ratelimit.Identifier{"ip": "10.0.0.1", "kind": "api", "user": user, "path": "/a"}
				for pb.Next() {
					l.Check(ctx, id)
				}
			})
		})
	}
}
