package rulestore

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// BenchmarkPublishSingleRule: 32 publishers at once each upsert one rule of
// a limiter whose published tier holds n rules. Every publish validates the
// request and reads (decodes and validates) the stored document before the
// server-side write, so decoding dominates as n grows. p50-ms and p99-ms are
// the latencies of single publishes under that contention.
func BenchmarkPublishSingleRule(b *testing.B) {
	const publishers = 32
	for _, n := range []int{100, 800} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			c := redistest.Client(b)
			s, err := New(c, Options{Prefix: redistest.Prefix(b) + "{rules}:", Available: available(b)})
			if err != nil {
				b.Fatal(err)
			}
			seed := make([]ratelimit.Rule, n)
			for i := range seed {
				seed[i] = rule(fmt.Sprintf("rule_%d", i), 100)
			}
			if _, err := s.Publish(ctx, request(b, map[string][]ratelimit.Rule{"search": seed})); err != nil {
				b.Fatal(err)
			}
			// One request per rule, built before the clock starts: each
			// upsert changes the limit of a rule already stored.
			reqs := make([]map[string][]ratelimit.Rule, n)
			for i := range reqs {
				reqs[i] = map[string][]ratelimit.Rule{"search": {rule(fmt.Sprintf("rule_%d", i), int64(200+i))}}
			}
			var (
				next      atomic.Int64
				mu        sync.Mutex
				latencies []time.Duration
				wg        sync.WaitGroup
				failed    atomic.Value
			)
			b.ResetTimer()
			for range publishers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var own []time.Duration
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						req := request(b, reqs[int(i)%n])
						start := time.Now()
						if _, err := s.Publish(ctx, req); err != nil {
							failed.Store(err)
							return
						}
						own = append(own, time.Since(start))
					}
					mu.Lock()
					latencies = append(latencies, own...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			b.StopTimer()
			if err, ok := failed.Load().(error); ok {
				b.Fatal(err)
			}
			slices.Sort(latencies)
			at := func(q float64) float64 {
				return float64(latencies[int(q*float64(len(latencies)-1))]) / float64(time.Millisecond)
			}
			b.ReportMetric(at(0.50), "p50-ms")
			b.ReportMetric(at(0.99), "p99-ms")
		})
	}
}
