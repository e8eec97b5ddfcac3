package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
)

// checker is one library's single check of key i; it reports whether it allowed.
type checker func(ctx context.Context, i int) (bool, error)

type contender struct {
	name  string
	build func(t testing.TB, c *redis.Client, prefix string, limit int) checker
}

func ratekitRules(n, limit int) []ratelimit.Rule {
	rules := make([]ratelimit.Rule, n)
	for i := range rules {
		rules[i] = ratelimit.Rule{Name: fmt.Sprintf("rule_%d", i), Characteristics: []string{"user"},
			Limit: ratelimit.Static(int64(limit)), Period: ratelimit.StaticPeriod(time.Hour)}
	}
	return rules
}

func ratekit(rules int) func(t testing.TB, c *redis.Client, prefix string, limit int) checker {
	return func(t testing.TB, c *redis.Client, prefix string, limit int) checker {
		l, err := ratelimit.New(ratelimit.Config{Name: "bench", Store: redisstore.New(c), KeyPrefix: prefix,
			Rules: ratekitRules(rules, limit), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]ratelimit.Identifier, 1000)
		for i := range ids {
			ids[i] = ratelimit.Identifier{"user": "user:" + strconv.Itoa(i)}
		}
		return func(ctx context.Context, i int) (bool, error) {
			r := l.Check(ctx, ids[i%len(ids)])
			return r.Action == ratelimit.ActionAllow, r.Err
		}
	}
}

var contenders = []contender{
	{"ratekit", ratekit(1)},
	{"ratekit_5rules", ratekit(5)},
	{"ulule", func(t testing.TB, c *redis.Client, prefix string, limit int) checker {
		store, err := ululeredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: prefix, MaxRetry: 0})
		if err != nil {
			t.Fatal(err)
		}
		l := ulule.New(store, ulule.Rate{Period: time.Hour, Limit: int64(limit)})
		return func(ctx context.Context, i int) (bool, error) {
			r, err := l.Get(ctx, "user:"+strconv.Itoa(i%1000))
			return !r.Reached, err
		}
	}},
	{"redis_rate", func(t testing.TB, c *redis.Client, prefix string, limit int) checker {
		l := redis_rate.NewLimiter(c)
		lim := redis_rate.Limit{Rate: limit, Burst: limit, Period: time.Hour}
		return func(ctx context.Context, i int) (bool, error) {
			r, err := l.Allow(ctx, prefix+"user:"+strconv.Itoa(i%1000), lim)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		}
	}},
}

func client(t testing.TB) (*redis.Client, *redistest.RoundTrips) {
	opt, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true // as recommended for ratekit: the limiter then needs no guard goroutine
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	h := &redistest.RoundTrips{}
	c.AddHook(h)
	return c, h
}

// TestContendersAgree proves the harness measures real limiting: every
// library admits exactly the limit for one key, in one round trip per check.
func TestContendersAgree(t *testing.T) {
	for _, ct := range contenders {
		t.Run(ct.name, func(t *testing.T) {
			c, rt := client(t)
			check := ct.build(t, c, redistest.Prefix(t), 5)
			ctx := context.Background()
			allowed := 0
			check(ctx, 0) // warm the script cache (EVALSHA after the first EVAL)
			start := rt.N.Load()
			for i := 0; i < 9; i++ {
				ok, err := check(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					allowed++
				}
			}
			if allowed != 4 {
				t.Fatalf("%s allowed %d of 9 after one earlier check, want 4 (limit 5)", ct.name, allowed)
			}
			if n := rt.N.Load() - start; n != 9 {
				t.Fatalf("%s made %d round trips for 9 checks", ct.name, n)
			}
		})
	}
}

func BenchmarkCheckRedis(b *testing.B) {
	for _, ct := range contenders {
		for _, mode := range []string{"serial", "parallel"} {
			b.Run(ct.name+"/"+mode, func(b *testing.B) {
				c, rt := client(b)
				check := ct.build(b, c, redistest.Prefix(b), 1<<30)
				ctx := context.Background()
				check(ctx, 0)
				start := rt.N.Load()
				b.ReportAllocs()
				b.ResetTimer()
				if mode == "serial" {
					for i := 0; i < b.N; i++ {
						if _, err := check(ctx, i); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					var next atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if _, err := check(ctx, int(next.Add(1))); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64(rt.N.Load()-start)/float64(b.N), "rt/op")
			})
		}
	}
}
