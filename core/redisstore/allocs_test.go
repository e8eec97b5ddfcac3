package redisstore

import (
	"context"
	"net"
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

// checkAllocationsCtx is checkAllocations for checks under ctx. The Limiter's
// Timeout is an hour, so that a deadline of ctx comes first.
func checkAllocationsCtx(t *testing.T, ctx context.Context, s ratelimit.Store, rules int, max, extra float64) {
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
// Limiter on a Store from Dial: the Limiter's own (its per-check timeout
// context, the counter key, the evaluations it hands to the caller), the
// store's (TestDialEvalAllocations) and what rueidis' reader goroutine
// allocates for the reply, which AllocsPerRun counts too. Under -race
// sync.Pool drops some of the reused buffers, so the bound is looser there.
func TestDialCheckAllocations(t *testing.T) {
	s := dialStore(t, redistest.URL(t))
	t.Run("1 rule", func(t *testing.T) { checkAllocations(t, s, 1, 12, 8) })
	t.Run("5 rules", func(t *testing.T) { checkAllocations(t, s, 5, 14, 8) })
}

// TestClientCheckAllocations bounds the allocations of a check on a Store
// from New with a *redis.Client (built with ContextTimeoutEnabled, as doc.go
// advises). Per check, with one rule: the Limiter's timeout context (4:
// context.WithTimeout), its channel (1: go-redis' pool calls ctx.Done), the
// counter key and the evaluations (2), the outcomes (1), the command and its
// arguments, the reply go-redis decodes into interfaces, and go-redis' health
// check of the pooled connection (3: SyscallConn and rawConn.Read), which a
// connection that hides its SyscallConn spares (see doc.go, "Allocations").
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
	t.Run("1 rule", func(t *testing.T) { checkAllocations(t, s, 1, 17, 8) })
	t.Run("5 rules", func(t *testing.T) { checkAllocations(t, s, 5, 26, 8) })
	// A caller whose context has a deadline within Config.Timeout (a server's
	// request deadline) spares the Limiter its timeout context, and go-redis'
	// ctx.Done the channel: 5 fewer.
	deadline, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t.Run("caller deadline/1 rule", func(t *testing.T) { checkAllocationsCtx(t, deadline, s, 1, 12, 8) })
	s = New(client(t, plainDialer))
	t.Run("no health check/1 rule", func(t *testing.T) { checkAllocations(t, s, 1, 14, 8) })
	t.Run("no health check, caller deadline/1 rule", func(t *testing.T) { checkAllocationsCtx(t, deadline, s, 1, 9, 8) })
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
		checkAllocations(t, New(c), 1, 17, 8)
	})
	t.Run("autopipeliner/1 rule", func(t *testing.T) {
		checkAllocations(t, New(autoPipeliner(t, redistest.Client(t))), 1, 36, 8)
	})
}

// TestDialEvalAllocations bounds the allocations of the store alone on the
// rueidis path, at most 6 per Eval: the outcomes, the command slice and
// rueidis' results (commands are pooled by rueidis, numbers by numStr), and
// what rueidis' reader goroutine allocates for the reply.
func TestDialEvalAllocations(t *testing.T) {
	s, k := dialStore(t, redistest.URL(t)), newKeyer(t)
	for _, tt := range []struct {
		name string
		ops  []ratelimit.Op
		max  float64
	}{
		{"plain 1 op", []ratelimit.Op{terminal(k.count("p1", 1<<40, 1))}, 6},
		{"plain 5 ops", []ratelimit.Op{k.count("p1", 1<<40, 1), k.count("p2", 1<<40, 1), k.count("p3", 1<<40, 1), k.count("p4", 1<<40, 1), terminal(k.count("p5", 1<<40, 1))}, 6},
		{"script 1 op with ban", []ratelimit.Op{terminal(banned(k.count("s1", 1<<40, 1), time.Hour))}, 6},
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
