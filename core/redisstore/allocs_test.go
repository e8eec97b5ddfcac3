package redisstore

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// checkAllocations checks that a check of rules (limit rules on one
// characteristic) through a Limiter on s allocates at most max, plus extra
// under -race, where sync.Pool drops a share of what is put back.
func checkAllocations(t *testing.T, s ratelimit.Store, rules int, max, extra float64) {
	t.Helper()
	checkAllocationsCtx(t, ctx, s, rules, max, extra)
}

// allocsLimiter is a Limiter on s with rules limit rules on one
// characteristic. Its Timeout is an hour, so that a deadline of a caller's
// context comes first.
func allocsLimiter(t *testing.T, s ratelimit.Store, rules int) *ratelimit.Limiter {
	t.Helper()
	rs := make([]ratelimit.Rule, rules)
	for i := range rs {
		rs[i] = ratelimit.Rule{Name: "r" + string(rune('a'+i)), Action: ratelimit.ActionLimit,
			Characteristics: []string{"user"}, Limit: 1 << 40, Period: time.Hour}
	}
	l, err := ratelimit.New(ratelimit.Config{Name: "allocs", Store: s, KeyPrefix: redistest.Prefix(t), Rules: rs, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// checkAllocationsCtx is checkAllocations for checks under ctx.
func checkAllocationsCtx(t *testing.T, ctx context.Context, s ratelimit.Store, rules int, max, extra float64) {
	t.Helper()
	l := allocsLimiter(t, s, rules)
	id := ratelimit.Identifier{"user": "u"}
	for range 100 { // the counters exist from here on, and rueidis dialled its connections
		l.Check(ctx, id)
	}
	if raceEnabled {
		max += extra
	}
	got := testing.AllocsPerRun(200, func() {
		if r := l.Check(ctx, id); r.Err != nil || !r.Matched {
			t.Fatalf("check: %+v", r)
		}
	})
	t.Logf("%v allocations per check", got)
	if got > max {
		t.Fatalf("%v allocations per check, want at most %v", got, max)
	}
}

// TestDialCheckAllocations bounds the allocations of a check through a
// Limiter on a Store from Dial at 6, with one caller and with 64: the
// Limiter's own (the counter key, its share of the evaluations' block; its
// per-check timeout is reused), the store's (TestDialEvalAllocations) and
// what rueidis' reader goroutine allocates for the reply, which is counted
// too. One rule takes the plain form (rueidis' results of DoMulti: 3), five
// the script (one Do). Under -race sync.Pool drops some of the reused
// buffers, so the bound is looser there.
func TestDialCheckAllocations(t *testing.T) {
	s := dialStore(t, redistest.URL(t))
	t.Run("1 rule", func(t *testing.T) { checkAllocations(t, s, 1, 6, 8) })
	t.Run("5 rules", func(t *testing.T) { checkAllocations(t, s, 5, 6, 8) })
	t.Run("64 callers/1 rule", func(t *testing.T) { checkAllocationsParallel(t, s, 1, 6, 8) })
	t.Run("64 callers/5 rules", func(t *testing.T) { checkAllocationsParallel(t, s, 5, 6, 8) })
}

// checkAllocationsParallel is checkAllocations with 64 callers at once, so
// that rueidis queues their commands for its writer goroutine instead of
// writing each on its caller's: the mean over every check, the callers'
// goroutines included.
func checkAllocationsParallel(t *testing.T, s ratelimit.Store, rules int, max, extra float64) {
	t.Helper()
	const callers, checks = 64, 100
	l := allocsLimiter(t, s, rules)
	id := ratelimit.Identifier{"user": "u"}
	run := func() {
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for range checks {
					if r := l.Check(ctx, id); r.Err != nil || !r.Matched {
						t.Errorf("check: %+v", r)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	run() // the counters exist, rueidis dialled its connections and started its writers
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	run()
	runtime.ReadMemStats(&after)
	if raceEnabled {
		max += extra
	}
	got := float64(after.Mallocs-before.Mallocs) / (callers * checks)
	t.Logf("%.2f allocations per check", got)
	if got > max {
		t.Fatalf("%.2f allocations per check, want at most %v", got, max)
	}
}

// TestClientCheckAllocations bounds the allocations of a check on a Store
// from New with a *redis.Client (built with ContextTimeoutEnabled, as doc.go
// advises) at 10 with one rule. Per check: the counter key and the outcomes
// (2), the command (1: redis.NewCmd; its argument slice is pooled) and its
// key in an interface (1 per op), the reply go-redis decodes into interfaces
// (the slice and its interface, and 1 per number of 256 or more: 2 per op
// but for small counts), and go-redis' health check of the pooled connection
// (3: SyscallConn and rawConn.Read), which a connection that hides its
// SyscallConn spares (see doc.go, "Allocations"). The Limiter's per-check
// timeout costs nothing: it reuses its timeout context.
func TestClientCheckAllocations(t *testing.T) {
	client := func(t *testing.T, dialer func(context.Context, string, string) (net.Conn, error)) *redis.Client {
		opt, err := redis.ParseURL(redistest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		opt.ContextTimeoutEnabled = true
		opt.Dialer = dialer
		c := redis.NewClient(opt)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	s := New(client(t, nil))
	t.Run("1 rule", func(t *testing.T) { checkAllocations(t, s, 1, 10, 8) })
	t.Run("5 rules", func(t *testing.T) { checkAllocations(t, s, 5, 20, 8) })
	// A caller whose context has a deadline within Config.Timeout (a server's
	// request deadline) is passed on as it is.
	deadline, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t.Run("caller deadline/1 rule", func(t *testing.T) { checkAllocationsCtx(t, deadline, s, 1, 10, 8) })
	s = New(client(t, plainDialer))
	t.Run("no health check/1 rule", func(t *testing.T) { checkAllocations(t, s, 1, 7, 8) })
	t.Run("no health check, caller deadline/1 rule", func(t *testing.T) { checkAllocationsCtx(t, deadline, s, 1, 7, 8) })
}

// plainDialer dials TCP connections that hide their SyscallConn, which turns
// off go-redis' health check of pooled connections (see doc.go).
func plainDialer(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Minute}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return struct{ net.Conn }{c}, nil
}

// TestGoRedisCheckAllocations bounds the allocations of a check through
// go-redis' other clients: a cluster client built with ContextTimeoutEnabled
// costs what a *redis.Client does; the autopipeliner is never context-bounded
// (the Limiter guards each check with a goroutine), and batches in go-redis'
// own structures.
func TestGoRedisCheckAllocations(t *testing.T) {
	t.Run("cluster/1 rule", func(t *testing.T) {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.ClusterAddrs(t), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		checkAllocations(t, New(c), 1, 10, 8)
	})
	t.Run("autopipeliner/1 rule", func(t *testing.T) {
		checkAllocations(t, New(autoPipeliner(t, redistest.Client(t))), 1, 36, 8)
	})
}

// TestDialEvalAllocations bounds the allocations of the store alone on the
// rueidis path: the outcomes, and rueidis' results of DoMulti (3: a slice in
// a struct it never gets back) in the plain form or the array of the reply in
// the script's (commands are pooled by rueidis, the plain form's command
// slice by the store, numbers by numStr); what rueidis' reader goroutine
// allocates for a reply is counted too.
func TestDialEvalAllocations(t *testing.T) {
	s, k := dialStore(t, redistest.URL(t)), newKeyer(t)
	for _, tt := range []struct {
		name string
		ops  []ratelimit.Op
		max  float64
	}{
		{"plain 1 op", []ratelimit.Op{terminal(k.count("p1", 1<<40, 1))}, 4},
		{"plain 5 ops", []ratelimit.Op{k.count("p1", 1<<40, 1), k.count("p2", 1<<40, 1), k.count("p3", 1<<40, 1), k.count("p4", 1<<40, 1), terminal(k.count("p5", 1<<40, 1))}, 4},
		{"script 1 op with ban", []ratelimit.Op{terminal(banned(k.count("s1", 1<<40, 1), time.Hour))}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for range 100 { // rueidis dials its pipelined connections on first use
				eval(t, s, check, tt.ops...)
			}
			got := testing.AllocsPerRun(200, func() {
				if _, err := s.Eval(ctx, check, tt.ops); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("%v allocations per Eval", got)
			max := tt.max
			if raceEnabled { // sync.Pool drops a share of rueidis' pooled commands
				max += 4 * float64(len(tt.ops))
			}
			if got > max {
				t.Fatalf("%v allocations per Eval, want at most %v", got, max)
			}
		})
	}
}

// TestDialBatchAllocations bounds the allocations of a CheckBatch of five
// one-rule checks (an Envoy request of five descriptors) on a Store from
// Dial: per check its key, its result and rueidis' results of its plain
// commands, and per batch a few slices of the engine's and the store's, each
// sized once (grown by append they took 6 more).
func TestDialBatchAllocations(t *testing.T) {
	s := dialStore(t, redistest.URL(t))
	l := allocsLimiter(t, s, 1)
	reqs := make([]ratelimit.Request, 5)
	for i := range reqs {
		reqs[i] = ratelimit.Request{Limiter: l, Identifier: ratelimit.Identifier{"user": string(rune('a' + i))}}
	}
	for range 100 { // the counters exist from here on, and rueidis dialled its connections
		ratelimit.CheckBatch(ctx, reqs)
	}
	max := 24.0
	if raceEnabled {
		max += 24 // sync.Pool drops some of the reused buffers
	}
	got := testing.AllocsPerRun(200, func() {
		for _, r := range ratelimit.CheckBatch(ctx, reqs) {
			if r.Err != nil || !r.Matched {
				t.Fatalf("check: %+v", r)
			}
		}
	})
	t.Logf("%v allocations per batch", got)
	if got > max {
		t.Fatalf("%v allocations per batch of 5, want at most %v", got, max)
	}
}
