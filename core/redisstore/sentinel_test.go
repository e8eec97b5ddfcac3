package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
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
	lastErr atomic.Value // the error of the last failed check, a string
	stop    chan struct{}
	wg      sync.WaitGroup
}

// drillBlocked is how long a check returning would count as blocked by the
// store, a hang rather than a slow machine: the Limiter's timeout is 100ms,
// this is 300 times that, the 30 s the other hang tests allow.
const drillBlocked = 30 * time.Second

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
					d.lastErr.Store(r.Err.Error())
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
	if d.t.Failed() {
		d.t.Logf("the last failed check's error: %v", d.lastErr.Load())
	}
	if b := d.bad.Load(); b != nil {
		d.t.Error(b)
	}
}

// waitLong waits up to two minutes for cond: a failover's phases take
// seconds, more on a loaded machine.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 2*time.Minute, what, cond)
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

// sentinelStores are the stores on a Sentinel's master that the failover
// drills run on, each with a function that closes it.
var sentinelStores = []struct {
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
}

// TestSentinelFailover drills a Sentinel failover (the master SIGKILLed, or
// SIGSTOPped and SIGCONTed after the failover, when it comes back as a
// replica) under a Limiter on a Store from Dial on a redis-sentinel:// URL
// and one from New on a go-redis FailoverClient: the checks fail open within
// their timeout while no master answers, the breaker opens and closes, the
// store finds the new master itself and counts there, and nothing outlives
// the store's Close.
func TestSentinelFailover(t *testing.T) {
	for _, c := range sentinelStores {
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

// TestSentinelStartDuringOutage: a service started while the sentinels
// answer but no master does (SIGKILLed or SIGSTOPped, its replica SIGKILLed
// so that none is promoted), or while no sentinel answers (SIGKILLed or
// SIGSTOPped), gets a Store from Dial by Dial's deadline; its checks fail
// open with ErrNotConnected, and once the servers are back the store
// connects by itself and counts on the master.
func TestSentinelStartDuringOutage(t *testing.T) {
	for _, c := range []struct {
		name string
		down func(st *redistest.SentinelSetup) (killed, paused []*redistest.Server)
	}{
		{"master_killed", func(st *redistest.SentinelSetup) ([]*redistest.Server, []*redistest.Server) {
			return []*redistest.Server{st.Master, st.Replica}, nil
		}},
		{"master_hung", func(st *redistest.SentinelSetup) ([]*redistest.Server, []*redistest.Server) {
			return []*redistest.Server{st.Replica}, []*redistest.Server{st.Master}
		}},
		{"sentinels_killed", func(st *redistest.SentinelSetup) ([]*redistest.Server, []*redistest.Server) {
			return st.Sentinels, nil
		}},
		{"sentinels_hung", func(st *redistest.SentinelSetup) ([]*redistest.Server, []*redistest.Server) {
			return nil, st.Sentinels
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := redistest.StartSentinel(t)
			killed, paused := c.down(st)
			for _, s := range killed {
				s.Stop()
			}
			for _, s := range paused {
				s.Pause(t)
			}
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			s, err := Dial(dctx, st.URL()+"?dial_timeout=500ms")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			op := newKeyer(t).count("a", 1<<40, 1)
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := s.Eval(cctx, check, []ratelimit.Op{op}); !errors.Is(err, ErrNotConnected) {
				t.Fatalf("a check before any master answered: %v, want ErrNotConnected", err)
			}
			for _, srv := range paused {
				srv.Resume(t)
			}
			for _, srv := range killed {
				srv.Restart(t)
			}
			if slices.Contains(killed, st.Replica) {
				// Restarted without data, the replica follows the master again.
				st.Replica.WaitReplicaOf(t, st.Master)
			}
			var last error
			waitLong(t, "a check succeeds once the servers are back", func() bool {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				_, last = s.Eval(cctx, check, []ratelimit.Op{op})
				return last == nil
			})
			c := redis.NewClient(&redis.Options{Addr: st.Master.Addr})
			defer func() { _ = c.Close() }()
			if n, err := c.Exists(ctx, op.Key).Result(); err != nil || n != 1 {
				t.Fatalf("the master has the counter: %d, %v", n, err)
			}
		})
	}
}

// subscriber matches a client of CLIENT LIST subscribed to a channel.
var subscriber = regexp.MustCompile(` sub=[1-9]`)

// watchedSentinel returns the sentinel that has a subscriber: the one a
// Store from Dial watches for +switch-master.
func watchedSentinel(t *testing.T, st *redistest.SentinelSetup) *redistest.Server {
	t.Helper()
	var found *redistest.Server
	waitLong(t, "a client subscribed to a sentinel", func() bool {
		for _, s := range st.Sentinels {
			c := redis.NewClient(&redis.Options{Addr: s.Addr})
			list, err := c.ClientList(ctx).Result()
			_ = c.Close()
			if err == nil && subscriber.MatchString(list) {
				found = s
				return true
			}
		}
		return false
	})
	return found
}

// TestSentinelFailoverWatchedSentinelHung: the sentinel that the store
// watches for +switch-master hangs (SIGSTOP) with the master; the other two
// fail it over, and the old master, SIGCONTed, comes back as a replica. The
// store missed +switch-master: rueidis (Dial) kept writing to the old master
// and every check failed READONLY until the sentinel came back. It dials
// again on READONLY. (A go-redis FailoverClient, New's, asks the hung
// sentinel again at every dial and never finds the new master: go-redis'
// to fix, not the store's.)
func TestSentinelFailoverWatchedSentinelHung(t *testing.T) {
	for _, c := range sentinelStores[:1] { // Dial
		t.Run(c.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
				goleak.IgnoreAnyFunction("github.com/ratekit/ratekit/core.(*Limiter).probeLoop"), rueidisDelay)
			st := redistest.StartSentinel(t)
			store, closeStore := c.store(t, st)
			defer closeStore()
			d := startFailoverDrill(t, st, store)
			waitLong(t, "checks succeed at the start", func() bool { return d.okSince.Load() > 100 })
			watched := watchedSentinel(t, st)
			watched.Pause(t)
			st.Master.Pause(t)
			d.reset("master and watched sentinel hung")
			waitLong(t, "checks fail with the master hung", func() bool { return d.failed.Load() > 0 })
			others := &redistest.SentinelSetup{Name: st.Name, Master: st.Master, Replica: st.Replica}
			for _, x := range st.Sentinels {
				if x != watched {
					others.Sentinels = append(others.Sentinels, x)
				}
			}
			others.WaitFailover(t, st.Replica)
			st.Master.Resume(t)
			st.Master.WaitReplicaOf(t, st.Replica)
			d.reset("old master back as a replica, watched sentinel hung")
			before := d.counted(st.Replica)
			waitLong(t, "checks count on the new master", func() bool {
				return d.okSince.Load() > 100 && d.counted(st.Replica) > before+100
			})
			watched.Resume(t)
			d.end()
		})
	}
}
