package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
)

// Fail-open against real servers: a Redis stopped mid-test, an address where
// nothing listens, and a server that accepts connections but never answers.
// Every check must allow with the error flag, within the per-check timeout,
// and the breaker must open after the configured failures and close again on
// recovery. No assertion bounds elapsed time (a loaded machine stretches
// it): against the server that never answers, the client's own timeouts are
// an hour, so a check that returns at all was cut off by the limiter's.

const checkTimeout = 100 * time.Millisecond

// failOpenLimiter returns a Limiter on client whose checks time out after
// timeout: checkTimeout where checks must fail, longer where some must
// succeed (a loaded machine may deschedule a check for 100ms).
func failOpenLimiter(t *testing.T, client redis.UniversalClient, timeout time.Duration, failures int, cooldown time.Duration) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{
		Name:      "failopen",
		Store:     redisstore.New(client),
		KeyPrefix: redistest.Prefix(t),
		Rules:     []ratelimit.Rule{basic("per_user")},
		Timeout:   timeout,
		Breaker:   ratelimit.BreakerConfig{Failures: failures, Cooldown: cooldown},
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// timedCheck runs one check and returns it with its duration.
func timedCheck(l *ratelimit.Limiter) (ratelimit.Result, time.Duration) {
	start := time.Now()
	r := l.Check(context.Background(), ratelimit.Identifier{"user": "u"})
	return r, time.Since(start)
}

func expectFailOpen(t *testing.T, step string, r ratelimit.Result) {
	t.Helper()
	if r.Err == nil || r.Action != ratelimit.ActionAllow || r.Info != nil || r.Rule != nil {
		t.Fatalf("%s: want allow with error flag, got %+v", step, r)
	}
}

func TestFailOpenRedisStoppedMidTest(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer client.Close()
	calls := &redistest.RoundTrips{}
	client.AddHook(calls)
	const cooldown = 300 * time.Millisecond
	// A stopped Redis refuses connections at once: no check here needs the
	// timeout to fail, and those before the outage and after it must succeed,
	// which a check descheduled for checkTimeout would not (and the one that
	// timed out after reaching the restarted server would count there).
	l := failOpenLimiter(t, client, 10*time.Second, 3, cooldown)

	if r, _ := timedCheck(l); r.Err != nil || r.Info == nil || r.Info.Count != 1 {
		t.Fatalf("before the outage: %+v", r)
	}
	srv.Stop()
	for i := 0; i < 3; i++ {
		r, _ := timedCheck(l)
		expectFailOpen(t, "redis stopped", r)
	}
	if s := l.BreakerState(); s != "open" {
		t.Fatalf("breaker after 3 failures = %s", s)
	}
	// While the breaker is open, checks answer without the network: only the
	// background prober reaches Redis, at most once per cooldown/4 interval.
	before, opened := calls.N.Load(), time.Now()
	for i := 0; i < 50; i++ {
		r, _ := timedCheck(l)
		expectFailOpen(t, "breaker open", r)
		if !errors.Is(r.Err, ratelimit.ErrCircuitOpen) {
			t.Fatalf("check %d while open reached the store: %v", i, r.Err)
		}
	}
	if probes := calls.N.Load() - before; probes > 1+int64(time.Since(opened)/(cooldown/4)) {
		t.Fatalf("open breaker: %d calls reached Redis in %v", probes, time.Since(opened))
	}
	srv.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, _ := timedCheck(l)
		if r.Err == nil {
			if r.Info == nil || r.Info.Count != 1 { // the restarted server is empty
				t.Fatalf("after recovery: %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("breaker never closed after Redis came back: %v (state %s)", r.Err, l.BreakerState())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s := l.BreakerState(); s != "closed" {
		t.Fatalf("breaker after recovery = %s", s)
	}
}

func TestFailOpenUnreachableAddress(t *testing.T) {
	redistest.URL(t) // real-Redis test family: same skip rule
	client := redis.NewClient(&redis.Options{Addr: redistest.UnusedAddr(t), MaxRetries: -1})
	defer client.Close()
	l := failOpenLimiter(t, client, checkTimeout, 2, time.Hour)
	for i := 0; i < 2; i++ {
		r, _ := timedCheck(l)
		expectFailOpen(t, "connection refused", r)
	}
	r, _ := timedCheck(l)
	expectFailOpen(t, "breaker open", r)
	if !errors.Is(r.Err, ratelimit.ErrCircuitOpen) { // the breaker answers before the store is called
		t.Fatalf("want ErrCircuitOpen, got %v", r.Err)
	}
}

func TestFailOpenServerNeverAnswers(t *testing.T) {
	redistest.URL(t)
	// Both ways of bounding a check: the limiter's guard goroutine (a default
	// client, which would wait 3s for its ReadTimeout) and a client that honours
	// context deadlines itself (redisstore then reports ContextBounded).
	for _, bounded := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", bounded), func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: redistest.Blackhole(t), MaxRetries: -1, ContextTimeoutEnabled: bounded,
				DialTimeout: time.Hour, ReadTimeout: time.Hour, WriteTimeout: time.Hour})
			defer client.Close()
			if got := redisstore.New(client).ContextBounded(); got != bounded {
				t.Fatalf("ContextBounded() = %v", got)
			}
			neverAnswers(t, client)
		})
	}
}

func neverAnswers(t *testing.T, client *redis.Client) {
	l := failOpenLimiter(t, client, checkTimeout, 3, time.Hour)
	for i := 0; i < 3; i++ {
		r, took := timedCheck(l)
		expectFailOpen(t, "hung server", r)
		// The client's own timeouts are an hour: a timeout here is the
		// limiter's deadline (a net.Error when go-redis applies it itself).
		var ne net.Error
		if !errors.Is(r.Err, context.DeadlineExceeded) && !(errors.As(r.Err, &ne) && ne.Timeout()) {
			t.Fatalf("hung server: want the check timeout, got %v", r.Err)
		}
		if took < checkTimeout {
			t.Fatalf("check returned after %v, before its timeout, against a server that never answers", took)
		}
	}
	if s := l.BreakerState(); s != "open" {
		t.Fatalf("breaker = %s", s)
	}
	r, _ := timedCheck(l)
	expectFailOpen(t, "breaker open", r)
	if !errors.Is(r.Err, ratelimit.ErrCircuitOpen) {
		t.Fatalf("want ErrCircuitOpen, got %v", r.Err)
	}
}

// TestFailOpenClusterNodeDown stops the master of a check's keys in a Redis
// Cluster whose other masters still answer (as during a failover). The
// breaker must stay open until that node answers again: its probe reads the
// keys of the check that opened it, not a key of another slot, which would
// answer at once, close the breaker and let the next checks pay the timeout
// and open it again, over and over (the drill saw this: open and closed
// logged about once a second each, checks taking the whole 100ms timeout).
func TestFailOpenClusterNodeDown(t *testing.T) {
	redistest.URL(t)
	// Without full coverage the other masters keep serving their slots
	// after the node fails, as they do once a replica takes its place.
	nodes := redistest.StartCluster(t, 3, "--cluster-require-full-coverage", "no")
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	ctx := context.Background()
	master := func(tag string) string {
		t.Helper()
		c, err := cc.MasterForKey(ctx, "{"+tag+"}")
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr
	}
	// A user whose counter lives on another master than the breaker's
	// default probe key.
	probeNode, user := master("failopen:probe"), ""
	for i := 0; user == ""; i++ {
		if u := fmt.Sprintf("u%d", i); master("failopen:per_user:user="+u) != probeNode {
			user = u
		}
	}
	down := redistest.MasterOf(t, cc, nodes, "{failopen:per_user:user="+user+"}")
	store, err := redisstore.Dial(ctx, "redis://"+addrs[0]+"?addr="+addrs[1]+"&addr="+addrs[2])
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l, err := ratelimit.New(ratelimit.Config{
		Name:      "failopen",
		Store:     store,
		KeyPrefix: redistest.Prefix(t),
		Rules:     []ratelimit.Rule{basic("per_user")},
		Timeout:   time.Second, // a loaded machine may take long; a failed check takes it whole here
		Breaker:   ratelimit.BreakerConfig{Failures: 3, Cooldown: 40 * time.Millisecond},
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func() ratelimit.Result { return l.Check(ctx, ratelimit.Identifier{"user": user}) }
	if r := check(); r.Err != nil || r.Count() != 1 {
		t.Fatalf("before the outage: %+v", r)
	}
	down.Stop()
	for i := 0; i < 3; i++ {
		expectFailOpen(t, "node down", check())
	}
	// The prober runs every 10ms to 40ms: 50 checks 10ms apart see several
	// probes of the node that is down, and none may close the breaker.
	for i := 0; i < 50; i++ {
		r := check()
		expectFailOpen(t, "breaker open", r)
		if !errors.Is(r.Err, ratelimit.ErrCircuitOpen) {
			t.Fatalf("check %d while the node is down reached the store: %v (the breaker closed on a probe of another node)", i, r.Err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	down.Restart(t) // with its nodes.conf: the same slots
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := check()
		if r.Err == nil {
			if r.Count() != 1 { // the restarted node is empty
				t.Fatalf("after recovery: %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("breaker never closed after the node came back: %v (state %s)", r.Err, l.BreakerState())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
