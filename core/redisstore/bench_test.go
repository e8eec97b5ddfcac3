package redisstore

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// benchTargets are the targets the benchmarks run on: go-redis and Dial, on
// the standalone server and on the cluster.
func benchTargets() []target {
	var ts []target
	for _, tg := range targets {
		switch tg.name {
		case "standalone", "cluster", "dial", "dial_cluster":
			ts = append(ts, tg)
		}
	}
	return ts
}

// BenchmarkLimiterCheck measures a Limiter Check through the Redis store with
// 1 and 5 limit rules (5 hash tags: up to 5 slots, on every cluster node),
// serial and with 4, 8, 16, 32 and 64 callers, and reports round trips per check through go-redis.
func BenchmarkLimiterCheck(b *testing.B) {
	for _, tg := range benchTargets() {
		b.Run(tg.name, func(b *testing.B) {
			s, c := tg.store(b)
			hook := &tripHook{} // counts only: no allocations of its own
			if s.dialed == nil {
				c.AddHook(hook)
			}
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
				report := func(b *testing.B, before int64) {
					if s.dialed != nil {
						return
					}
					b.ReportMetric(float64(hook.N.Load()-before)/float64(b.N), "roundtrips/op")
				}
				b.Run(fmt.Sprintf("rules=%d/serial", n), func(b *testing.B) {
					b.ReportAllocs()
					before := hook.N.Load()
					for b.Loop() {
						check(b)
					}
					report(b, before)
				})
				for _, callers := range []int{4, 8, 16, 32, 64} {
					b.Run(fmt.Sprintf("rules=%d/c%d", n, callers), func(b *testing.B) {
						b.ReportAllocs()
						before := hook.N.Load()
						b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								check(b)
							}
						})
						report(b, before)
					})
				}
			}
		})
	}
}

// BenchmarkEval measures the store alone: one Eval of 1 and 5 counter ops.
func BenchmarkEval(b *testing.B) {
	for _, tg := range benchTargets() {
		b.Run(tg.name, func(b *testing.B) {
			s, _ := tg.store(b)
			k := newKeyer(b)
			for _, n := range []int{1, 5} {
				ops := make([]ratelimit.Op, n)
				for i := range ops {
					ops[i] = terminal(k.count(fmt.Sprint("op", i), 1<<50, 1))
				}
				b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, err := s.Eval(ctx, ratelimit.ModeCheck, ops); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}
