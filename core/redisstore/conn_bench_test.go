package redisstore

import (
	"fmt"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// BenchmarkDialCheck is BenchmarkLimiterCheck on a Store from Dial, serial
// and with 64 concurrent callers.
func BenchmarkDialCheck(b *testing.B) {
	s := dialStore(b, redistest.URL(b))
	prefix := redistest.Prefix(b)
	for _, n := range []int{1, 5} {
		rules := make([]ratelimit.Rule, n)
		for i := range rules {
			rules[i] = ratelimit.Rule{
				Name: fmt.Sprint("rule", i), Action: ratelimit.ActionLimit, Characteristics: []string{"user"},
				Limit: 1 << 50, Period: time.Hour,
			}
		}
		l, err := ratelimit.New(ratelimit.Config{Name: "bench", Store: s, Rules: rules, KeyPrefix: prefix, Timeout: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		id := ratelimit.Identifier{"user": "user:123"}
		check := func(b *testing.B) {
			if r := l.Check(ctx, id); r.Err != nil || r.Blocked() || len(r.Evaluations) != n {
				b.Fatalf("check: %+v", r)
			}
		}
		b.Run(fmt.Sprintf("rules=%d/serial", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				check(b)
			}
		})
		b.Run(fmt.Sprintf("rules=%d/c64", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					check(b)
				}
			})
		})
	}
}
