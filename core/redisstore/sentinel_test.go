package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// failoverDrill is a Limiter on a store of a private Sentinel setup, checked
// continuously by callers on several goroutines while the setup's master
// fails.
type failoverDrill struct {
	t       *testing.T
	st      *redistest.SentinelSetup
	l       *ratelimit.Limiter
	prefix  string
	phase   atomic.Value // the phase a check starts in
	okSince atomic.Int64 // checks that succeeded since the last reset
	failed  atomic.Int64 // checks that failed (with Err) since the last reset
	bad     atomic.Value // the first result that breaks the rules
	stop    chan struct{}
	wg      sync.WaitGroup
}

// drillBlocked is how long a check returning would count as blocked by the
// store: the Limiter's timeout is 100ms, this is 100 times that.
const drillBlocked = 10 * time.Second

func startFailoverDrill(t *testing.T, st *redistest.SentinelSetup, store ratelimit.Store) *failoverDrill {
	d := &failoverDrill{t: t, st: st, prefix: redistest.Prefix(t), stop: make(chan struct{})}
	l, err := ratelimit.New(ratelimit.Config{
		Name:      "failover",
		Store:     store,
		KeyPrefix: d.prefix,
		Rules: []ratelimit.Rule{{Name: "per_user", Action: ratelimit.ActionLimit, Characteristics: []string{"user"},
			Limit: 1 << 40, Period: time.Hour}},
		Timeout: 100 * time.Millisecond,
		Breaker: ratelimit.BreakerConfig{Failures: 3, Cooldown: 500 * time.Millisecond},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	d.l = l
	d.phase.Store("healthy")
	for g := range 16 {
		d.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-d.stop:
					return
				case <-time.After(time.Millisecond): // paced, as requests arriving over a network
				}
				start := time.Now()
				r := l.Check(context.Background(), ratelimit.Identifier{"user": fmt.Sprint("u", g, "_", i%20)})
				switch lat := time.Since(start); {
				case lat > drillBlocked:
					d.bad.CompareAndSwap(nil, fmt.Sprintf("%s: a check took %v", d.phase.Load(), lat))
				case r.Err == nil && r.Info == nil:
					d.bad.CompareAndSwap(nil, fmt.Sprintf("%s: a result with neither info nor error: %+v", d.phase.Load(), r))
				case r.Err != nil && (r.Action != ratelimit.ActionAllow || r.Info != nil):
					d.bad.CompareAndSwap(nil, fmt.Sprintf("%s: a failed check must allow without info: %+v", d.phase.Load(), r))
				case r.Err != nil:
					d.failed.Add(1)
				default:
					d.okSince.Add(1)
				}
			}
		})
	}
	t.Cleanup(d.end)
	return d
}

func (d *failoverDrill) reset(phase string) {
	d.phase.Store(phase)
	d.okSince.Store(0)
	d.failed.Store(0)
}

// end stops the callers and reports a result that broke the rules.
func (d *failoverDrill) end() {
	select {
	case <-d.stop:
		return
	default:
	}
	close(d.stop)
	d.wg.Wait()
	if b := d.bad.Load(); b != nil {
		d.t.Error(b)
	}
}

// waitLong waits up to two minutes for cond: a failover's phases take
// seconds, more on a loaded machine.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// counted returns the sum of the drill's counters on srv.
func (d *failoverDrill) counted(srv *redistest.Server) int64 {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer func() { _ = c.Close() }()
	var sum int64
	iter := c.Scan(ctx, 0, d.prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if n, err := c.Get(ctx, iter.Val()).Int64(); err == nil {
			sum += n
		}
	}
	return sum
}

// run fails the setup's master over (SIGKILL, or SIGSTOP then SIGCONT once
// the replica is promoted) and checks that the checks fail open and the
// breaker opens while no master answers, that they count on the new master
// once it is promoted, and that the breaker closes again.
func (d *failoverDrill) run(hang bool) {
	t, st := d.t, d.st
	waitLong(t, "checks succeed at the start", func() bool { return d.okSince.Load() > 100 })
	if n := d.counted(st.Master); n == 0 {
		t.Fatal("no counter on the master")
	}
	d.reset("master down")
	if hang {
		st.Master.Pause(t)
	} else {
		st.Master.Stop()
	}
	waitLong(t, "checks fail with the master down", func() bool { return d.failed.Load() > 0 })
	waitLong(t, "the breaker opens with the master down", func() bool { return d.l.BreakerState() != "closed" })
	st.WaitFailover(t, st.Replica)
	d.reset("replica promoted")
	waitLong(t, "checks succeed on the promoted replica", func() bool { return d.okSince.Load() > 100 })
	waitLong(t, "the breaker closes", func() bool { return d.l.BreakerState() == "closed" })
	before := d.counted(st.Replica)
	waitLong(t, "checks count on the new master", func() bool { return d.counted(st.Replica) > before+100 })
	if !hang {
		return
	}
	st.Master.Resume(t)
	st.Master.WaitReplicaOf(t, st.Replica)
	d.reset("old master back as a replica")
	before = d.counted(st.Replica)
	waitLong(t, "checks count on the new master with the old one back", func() bool {
		return d.okSince.Load() > 100 && d.counted(st.Replica) > before+100
	})
	d.reset("settled")
	waitLong(t, "checks go on succeeding", func() bool { return d.okSince.Load() > 500 })
	if n := d.failed.Load(); n > 0 {
		t.Errorf("%d checks failed with the old master a replica of the new one", n)
	}
}

// TestSentinelFailover drills a Sentinel failover (the master SIGKILLed, or
// SIGSTOPped and SIGCONTed after the failover, when it comes back as a
// replica) under a Limiter on a Store from Dial on a redis-sentinel:// URL
// and one from New on a go-redis FailoverClient: the checks fail open within
// their timeout while no master answers, the breaker opens and closes, the
// store finds the new master itself and counts there, and nothing outlives
// the store's Close.
func TestSentinelFailover(t *testing.T) {
	for _, c := range []struct {
		name  string
		store func(t *testing.T, st *redistest.SentinelSetup) (ratelimit.Store, func())
	}{
		{"dial", func(t *testing.T, st *redistest.SentinelSetup) (ratelimit.Store, func()) {
			s, err := Dial(ctx, st.URL()+"?dial_timeout=500ms&write_timeout=500ms")
			if err != nil {
				t.Fatal(err)
			}
			return s, func() { _ = s.Close() }
		}},
		{"new_failover_client", func(t *testing.T, st *redistest.SentinelSetup) (ratelimit.Store, func()) {
			c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.Name, SentinelAddrs: st.Addrs(),
				ContextTimeoutEnabled: true, DialTimeout: 500 * time.Millisecond})
			return New(c), func() { _ = c.Close() }
		}},
	} {
		for _, hang := range []bool{false, true} {
			name := c.name + "/kill"
			if hang {
				name = c.name + "/stop"
			}
			t.Run(name, func(t *testing.T) {
				defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
					goleak.IgnoreAnyFunction("github.com/ratekit/ratekit/core.(*Limiter).probeLoop"), rueidisDelay)
				st := redistest.StartSentinel(t)
				store, closeStore := c.store(t, st)
				d := startFailoverDrill(t, st, store)
				d.run(hang)
				d.end()
				closeStore()
			})
		}
	}
}
