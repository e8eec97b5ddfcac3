package ratelimit_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// BenchRules returns n counting rules, each applicable to every identifier with
// "user" and "ip", with limits high enough that nothing blocks.
func benchRules(n int) []ratelimit.Rule {
	rules := make([]ratelimit.Rule, n)
	for i := range rules {
		rules[i] = ratelimit.Rule{
			Name:            fmt.Sprintf("rule_%d", i),
			Characteristics: []string{"user", "ip"}[:1+i%2],
			Limit:           1 << 40,
			Period:          time.Hour,
		}
	}
	return rules
}

func BenchmarkCheckMemory(b *testing.B) {
	ids := make([]ratelimit.Identifier, 1000)
	for i := range ids {
		ids[i] = ratelimit.Identifier{"user": "user:" + strconv.Itoa(i), "ip": "203.0.113." + strconv.Itoa(i%250)}
	}
	for _, n := range []int{1, 5} {
		l, err := ratelimit.New(ratelimit.Config{Name: "bench", Store: ratelimit.NewMemoryStore(), Rules: benchRules(n)})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.Run(fmt.Sprintf("rules=%d/serial", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if r := l.Check(ctx, ids[i%len(ids)]); r.Err != nil {
					b.Fatal(r.Err)
				}
			}
		})
		b.Run(fmt.Sprintf("rules=%d/parallel", n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if r := l.Check(ctx, ids[i%len(ids)]); r.Err != nil {
						b.Error(r.Err)
						return
					}
					i++
				}
			})
		})
	}
}

// BenchmarkCheckNopStore measures the limiter's own share of a check on a
// network store's path, with a store that does nothing: bounded with the
// caller's deadline first (no derived context), bounded under the limiter's
// timeout, and guarded by a goroutine (a store that is not ContextBounded).
func BenchmarkCheckNopStore(b *testing.B) {
	id := ratelimit.Identifier{"user": "u:1"}
	dctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, bc := range []struct {
		name    string
		ctx     context.Context
		bounded bool
	}{
		{"bounded/caller_deadline", dctx, true},
		{"bounded/timeout", context.Background(), true},
		{"guarded", context.Background(), false},
	} {
		for _, n := range []int{1, 5} {
			l, err := ratelimit.New(ratelimit.Config{Name: "bench", Store: nopStore{bounded: bc.bounded}, Rules: benchRules(n), Timeout: 2 * time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/rules=%d", bc.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if r := l.Check(bc.ctx, id); r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			})
		}
	}
}
