package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestDialFaults runs 64 callers through a Limiter on a Store from Dial while
// a private Redis is SIGKILLed and restarted, then SIGSTOPped (it accepts TCP
// and never answers) and SIGCONTed. It asserts what must hold on any machine:
// no check blocks (each returns within a bound far above the Limiter's
// timeout), every check during an outage allows with Err set, a hung server
// is given up and re-dialled, checks succeed again after each return, and no
// goroutine of the store outlives Close. Latencies are logged, not asserted.
func TestDialFaults(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		// The breaker's prober outlives the checks by design (see core).
		goleak.IgnoreAnyFunction("github.com/ratekit/ratekit/core.(*Limiter).probeLoop"))
	srv := redistest.StartServer(t)
	// A short read timeout, so that the hung server is given up quickly.
	s, err := Dial(ctx, srv.URL()+"?read_timeout=500ms&dial_timeout=500ms", WithConns(2))
	if err != nil {
		t.Fatal(err)
	}
	const timeout, cooldown = 100 * time.Millisecond, 500 * time.Millisecond
	l, err := ratelimit.New(ratelimit.Config{
		Name:      "faults",
		Store:     s,
		KeyPrefix: redistest.Prefix(t),
		Rules: []ratelimit.Rule{{Name: "per_user", Action: ratelimit.ActionLimit, Characteristics: []string{"user"},
			Limit: 1 << 40, Period: time.Hour}},
		Timeout: timeout,
		Breaker: ratelimit.BreakerConfig{Failures: 3, Cooldown: cooldown},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}

	// A check returning after this long would be a check blocked by the
	// store: the Limiter's timeout is 100ms, this is 100 times that.
	const blocked = 10 * time.Second
	var (
		phase   atomic.Value // the phase a check starts in
		okSince atomic.Int64 // checks that succeeded since the last reset
		failed  atomic.Int64 // checks that failed (with Err) since the last reset
		maxLat  atomic.Int64
		bad     atomic.Value // first result that breaks the rules
	)
	phase.Store("healthy")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Microsecond): // paced, as requests arriving over a network
				}
				start := time.Now()
				r := l.Check(context.Background(), ratelimit.Identifier{"user": fmt.Sprint("u", g, "_", i%50)})
				lat := time.Since(start)
				for {
					m := maxLat.Load()
					if int64(lat) <= m || maxLat.CompareAndSwap(m, int64(lat)) {
						break
					}
				}
				switch {
				case lat > blocked:
					bad.CompareAndSwap(nil, fmt.Sprintf("%s: a check took %v", phase.Load(), lat))
				case r.Err == nil && r.Info == nil:
					bad.CompareAndSwap(nil, fmt.Sprintf("%s: a result with neither info nor error: %+v", phase.Load(), r))
				case r.Err != nil && (r.Action != ratelimit.ActionAllow || r.Info != nil):
					bad.CompareAndSwap(nil, fmt.Sprintf("%s: a failed check must allow without info: %+v", phase.Load(), r))
				case r.Err != nil:
					failed.Add(1)
				default:
					okSince.Add(1)
				}
			}
		})
	}
	// eventually waits (generously) for cond.
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s (breaker %s)", what, l.BreakerState())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	reset := func(name string) {
		phase.Store(name)
		okSince.Store(0)
		failed.Store(0)
	}
	allDown := func() bool {
		for _, c := range s.pool.conns {
			if c.isUp() {
				return false
			}
		}
		return true
	}

	reset("healthy")
	eventually("checks succeed at the start", func() bool { return okSince.Load() > 100 })
	reset("killed")
	srv.Stop()
	eventually("the breaker opens after SIGKILL", func() bool { return l.BreakerState() != "closed" })
	eventually("the connections notice the dead server", allDown)
	reset("restarted")
	srv.Restart(t)
	eventually("checks succeed after the restart", func() bool { return okSince.Load() > 100 })

	reset("stopped")
	srv.Pause(t)
	eventually("checks fail while the server is stopped", func() bool { return failed.Load() > 0 })
	eventually("the breaker opens after SIGSTOP", func() bool { return l.BreakerState() != "closed" })
	eventually("the hung connections are given up", allDown)
	reset("continued")
	srv.Resume(t)
	eventually("checks succeed after SIGCONT", func() bool { return okSince.Load() > 100 })
	eventually("the breaker closes", func() bool { return l.BreakerState() == "closed" })
	close(stop)
	wg.Wait()

	if b := bad.Load(); b != nil {
		t.Error(b)
	}
	t.Logf("slowest check: %v (timeout %v)", time.Duration(maxLat.Load()).Round(time.Millisecond), timeout)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(ctx, check, []ratelimit.Op{{Kind: ratelimit.OpCount, Key: "k", Cost: 1, Limit: 1, Period: time.Second}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Eval after Close: %v", err)
	}
}

// TestDialHungServer: with no Limiter in front, a check on a server that
// never answers returns when its context ends, and a check without deadline
// fails when the read timeout gives the connection up.
func TestDialHungServer(t *testing.T) {
	srv := redistest.StartServer(t)
	s := dialStore(t, srv.URL()+"?read_timeout=300ms&dial_timeout=300ms", WithConns(1))
	k := newKeyer(t)
	op := k.count("a", 10, 1)
	eval(t, s, check, op)
	srv.Pause(t)
	defer srv.Resume(t)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.Eval(cctx, check, []ratelimit.Op{op}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Eval on a stopped server with a deadline: %v, want DeadlineExceeded", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Eval(ctx, check, []ratelimit.Op{op})
		done <- err
	}()
	select {
	case err := <-done:
		// The hung connection failed it, or (given up already) refused it.
		if err == nil {
			t.Fatal("Eval on a stopped server succeeded")
		}
		t.Logf("Eval without deadline on a stopped server: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Eval without deadline on a stopped server still waits after 30s")
	}
	srv.Resume(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := s.Eval(ctx, check, []ratelimit.Op{op})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no success within 30s of SIGCONT: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
