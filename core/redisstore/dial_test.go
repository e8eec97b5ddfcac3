package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	ratelimit "github.com/ratekit/ratekit/core"
	ikeys "github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/redistest"
)

// rueidisDelay is a goroutine of rueidis that a closed client may leave
// behind for under a second: the delayed retry of a cluster topology refresh
// (NewClient first tries a single address as a cluster node), which sleeps,
// then finds the client closed and ends.
var rueidisDelay = goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1")

func TestDialEvalAndDelete(t *testing.T) {
	s, k := dialStore(t, redistest.URL(t)), newKeyer(t)
	if !s.ContextBounded() {
		t.Fatal("a Store from Dial must be ContextBounded")
	}
	op := k.count("a", 2, 1)
	expectOutcomes(t, "1", eval(t, s, check, op), ok(1, time.Minute))
	expectOutcomes(t, "2", eval(t, s, check, op), ok(2, time.Minute))
	expectOutcomes(t, "3", eval(t, s, check, op), over(3, time.Minute))
	n, err := s.Delete(ctx, []string{op.Key, k.key("missing")})
	if err != nil || n != 1 {
		t.Fatalf("Delete = %d, %v; want 1, nil", n, err)
	}
	expectOutcomes(t, "after delete", eval(t, s, check, op), ok(1, time.Minute))
	if _, err := s.Eval(ctx, check, []ratelimit.Op{{Kind: ratelimit.OpCount, Key: k.key("bad"), Cost: 1, Limit: 1, Period: -time.Second}}); err != nil {
		t.Fatalf("a zero period is sent as 0 ms: %v", err)
	}
}

// TestDialScriptFlushed: after SCRIPT FLUSH the store falls back to EVAL,
// which caches the script again, on one server and on every cluster node.
func TestDialScriptFlushed(t *testing.T) {
	for _, tg := range []struct {
		name string
		url  func(testing.TB) string
		c    func(testing.TB) redis.UniversalClient
	}{
		{"standalone", redistest.URL, func(t testing.TB) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", redistest.ClusterURL, func(t testing.TB) redis.UniversalClient { return redistest.ClusterClient(t) }},
	} {
		t.Run(tg.name, func(t *testing.T) {
			c := tg.c(t)
			s, k := dialStore(t, tg.url(t)), newKeyer(t)
			// Bans, so the script and not the plain form; two slots, so two
			// scripts in one DoMulti on the cluster.
			a := banned(k.count("a", 10, 1), time.Hour)
			b := banned(k.count(nameInOtherSlot(k, "b", k.key("a")), 10, 1), time.Hour)
			expectOutcomes(t, "1", eval(t, s, check, a, b), ok(1, time.Minute), ok(1, time.Minute))
			flush := func(m *redis.Client) error { return m.ScriptFlush(ctx).Err() }
			if err := masters(c, flush); err != nil {
				t.Fatal(err)
			}
			expectOutcomes(t, "after flush", eval(t, s, check, a, b), ok(2, time.Minute), ok(2, time.Minute))
			expectOutcomes(t, "single op after flush", eval(t, s, check, a), ok(3, time.Minute))
			if err := masters(c, flush); err != nil {
				t.Fatal(err)
			}
			expectOutcomes(t, "single op after a second flush", eval(t, s, check, a), ok(4, time.Minute))
			node := c
			if cc, isCluster := c.(*redis.ClusterClient); isCluster {
				m, err := cc.MasterForKey(ctx, a.Key)
				if err != nil {
					t.Fatal(err)
				}
				node = m
			}
			if ok, err := node.ScriptExists(ctx, evaluateHash).Result(); err != nil || !ok[0] {
				t.Fatalf("script not cached again: %v %v", ok, err)
			}
		})
	}
}

// TestDialURL: user, password and database of the URL reach the server, and
// errors never show the password.
func TestDialURL(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 3})
	defer admin.Close()
	if err := admin.Do(ctx, "ACL", "SETUSER", "limiter", "on", ">s3cret", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}

	s := dialStore(t, "redis://limiter:s3cret@"+srv.Addr+"/3")
	k := newKeyer(t)
	op := k.count("a", 10, 1)
	expectOutcomes(t, "db 3", eval(t, s, check, op), ok(1, time.Minute))
	if v, err := admin.Get(ctx, op.Key).Result(); err != nil || v != "1" {
		t.Fatalf("GET %s in db 3 = %q, %v; want 1", op.Key, v, err)
	}

	o, err := ParseURL("redis://limiter:wrong-password@" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, Options{Client: o, RequireConnection: true})
	if err == nil || strings.Contains(err.Error(), "wrong-password") {
		t.Fatalf("Open with a wrong password: %v; want an error without the password", err)
	}
	if _, err := Dial(ctx, "redis://u:p%zz@h:1"); err == nil || strings.Contains(err.Error(), "p%zz") {
		t.Fatalf("bad URL: %v", err)
	}
}

// TestDialClose: Close ends every goroutine of the store, and later calls
// fail with ErrClosed; so does Close of a store still connecting.
func TestDialClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), rueidisDelay)
	s, err := Dial(ctx, redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	k := newKeyer(t)
	eval(t, s, check, k.count("a", 10, 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(ctx, check, []ratelimit.Op{k.count("a", 10, 1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Eval after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Delete(ctx, []string{k.key("a")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Delete after Close: %v, want ErrClosed", err)
	}
	_ = s.Close() // twice is fine

	down, err := Dial(ctx, "redis://"+redistest.UnusedAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := down.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := down.Eval(ctx, check, []ratelimit.Op{k.count("a", 10, 1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Eval after Close of a store never connected: %v, want ErrClosed", err)
	}
}

// TestDialRefusedSaysWhatToFix: a server that refuses the URL's credentials
// or database fails the checks with the server's words and what to change
// in the URL.
func TestDialRefusedSaysWhatToFix(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	if err := c.ConfigSet(ctx, "requirepass", "right").Err(); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	for _, tc := range []struct{ name, url, want string }{
		{"wrong password", "redis://:wrong@" + srv.Addr, "WRONGPASS"},
		{"no password", "redis://" + srv.Addr, "NOAUTH"},
		{"database out of range", "redis://:right@" + srv.Addr + "/99", "past the server's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Dial(ctx, tc.url)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// The first attempt is over when Dial returns, or soon after.
			deadline := time.Now().Add(30 * time.Second)
			for {
				_, err := s.Delete(ctx, []string{"k"})
				if errors.Is(err, ErrNotConnected) && strings.Contains(err.Error(), tc.want) && strings.Contains(err.Error(), "of the Redis URL") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Delete: %v, want ErrNotConnected with %q and what to change in the URL", err, tc.want)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestDialCloseWhileHandshaking: a hung server (SIGSTOP) accepts the TCP
// connection of the first connection attempt and never answers its
// handshake. Close ends that attempt, as it ends a dial, rather than wait for
// the client's timeouts (an hour here); no goroutine outlives it, and
// concurrent Closes all return.
func TestDialCloseWhileHandshaking(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), rueidisDelay)
	srv := redistest.StartServer(t)
	srv.Pause(t)
	defer srv.Resume(t)
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond) // Dial returns, still connecting
	defer cancel()
	s, err := Dial(cctx, srv.URL()+"?dial_timeout=1h&write_timeout=1h")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(ctx, check, []ratelimit.Op{newKeyer(t).count("a", 10, 1)}); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Eval while the handshake hangs: %v, want ErrNotConnected", err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { _ = s.Close() })
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Close still waits for the hung handshake after 30s")
	}
}

// TestDialCancel: callers whose context ends early return, and the replies
// of everybody else still reach the right caller. Each caller has a key and a
// period of its own, so a reply delivered to the wrong caller would show a
// wrong TTL or count.
func TestDialCancel(t *testing.T) {
	s, k := dialStore(t, redistest.URL(t)), newKeyer(t)
	const callers = 32
	var wg sync.WaitGroup
	var canceled, answered atomic.Int64
	for i := range callers {
		wg.Go(func() {
			period := time.Duration(i+1) * time.Hour
			op := k.count(fmt.Sprint("k", i), 1<<40, 1)
			op.Period = period
			last := 0.0
			for j := range 200 {
				cctx, cancel := context.WithCancel(ctx)
				switch j % 3 {
				case 0:
					cancel() // some before the send, some while waiting
				case 1:
					go cancel()
				}
				out, err := s.Eval(cctx, check, []ratelimit.Op{op})
				cancel()
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						t.Errorf("caller %d: %v", i, err)
						return
					}
					canceled.Add(1)
					continue
				}
				answered.Add(1)
				o := out[0]
				if o.TTL > period || o.TTL <= period-time.Hour || o.Count <= last {
					t.Errorf("caller %d got %+v after count %v: a reply for another caller (period %v)", i, o, last, period)
					return
				}
				last = o.Count
			}
		})
	}
	wg.Wait()
	t.Logf("%d answered, %d canceled", answered.Load(), canceled.Load())
	if answered.Load() == 0 {
		t.Fatal("no check was answered")
	}
}

// TestDialStartsWithRedisDown: a service starts while its Redis is down. Dial
// returns a Store at once; checks through a Limiter fail open (allowed, with
// Err) and the breaker opens; once redis-server starts on that address the
// store connects in the background and checks count again. With
// RequireConnection, Open fails instead.
func TestDialStartsWithRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Stop()

	o, err := ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, Options{Client: o, RequireConnection: true}); err == nil {
		t.Fatal("Open with RequireConnection succeeded with Redis down")
	}

	s, err := Dial(ctx, srv.URL())
	if err != nil {
		t.Fatalf("Dial with Redis down: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	k := newKeyer(t)
	if _, err := s.Eval(ctx, check, []ratelimit.Op{k.count("direct", 10, 1)}); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Eval before connecting: %v, want ErrNotConnected", err)
	}
	l, err := ratelimit.New(ratelimit.Config{
		Name: "down", Store: s, KeyPrefix: string(k),
		Rules: []ratelimit.Rule{{Name: "per_user", Action: ratelimit.ActionLimit, Characteristics: []string{"user"},
			Limit: 1 << 40, Period: time.Hour}},
		// Nothing here must time out: with Redis down a check fails at once
		// (ErrNotConnected, then ErrCircuitOpen), and those after the restart
		// must succeed, which under a short timeout (100ms before) a loaded
		// machine that descheduled the check that long would fail.
		Timeout: 10 * time.Second,
		Breaker: ratelimit.BreakerConfig{Failures: 3, Cooldown: 100 * time.Millisecond},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	id := ratelimit.Identifier{"user": "u"}
	for range 5 {
		r := l.Check(ctx, id)
		if r.Action != ratelimit.ActionAllow || !errors.Is(r.Err, ErrNotConnected) && !errors.Is(r.Err, ratelimit.ErrCircuitOpen) {
			t.Fatalf("check with Redis down: %+v; want allowed with ErrNotConnected or ErrCircuitOpen", r)
		}
	}
	if l.BreakerState() == "closed" {
		t.Fatal("the breaker did not open with Redis down")
	}

	srv.Restart(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	waitFor(t, "checks count once Redis is up", func() bool {
		r := l.Check(ctx, id)
		return r.Err == nil && r.Matched
	})
	keys, err := c.Keys(ctx, ikeys.GlobEscape(string(k))+"*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys on the server = %v, %v; want the one counter", keys, err)
	}
	before, _ := c.Get(ctx, keys[0]).Int()
	if r := l.Check(ctx, id); r.Err != nil {
		t.Fatal(r.Err)
	}
	if after, _ := c.Get(ctx, keys[0]).Int(); after != before+1 {
		t.Fatalf("counter %d after a check, was %d", after, before)
	}
}

// TestDialFaults runs 64 callers through a Limiter on a Store from Dial while
// a private Redis is SIGKILLed and restarted, then SIGSTOPped (it accepts TCP
// and never answers) and SIGCONTed. It asserts what must hold on any machine:
// no check blocks (each returns within a bound far above the Limiter's
// timeout), every check during an outage allows with Err set, checks succeed
// again after each return, and no goroutine of the store outlives Close.
// Latencies are logged, not asserted.
func TestDialFaults(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		// The breaker's prober outlives the checks by design (see core).
		goleak.IgnoreAnyFunction("github.com/ratekit/ratekit/core.(*Limiter).probeLoop"), rueidisDelay)
	srv := redistest.StartServer(t)
	// Short timeouts, so that the hung server is given up quickly.
	s, err := Dial(ctx, srv.URL()+"?write_timeout=500ms&dial_timeout=500ms")
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
	reset := func(name string) {
		phase.Store(name)
		okSince.Store(0)
		failed.Store(0)
	}

	reset("healthy")
	waitFor(t, "checks succeed at the start", func() bool { return okSince.Load() > 100 })
	reset("killed")
	srv.Stop()
	waitFor(t, "checks fail after SIGKILL", func() bool { return failed.Load() > 0 })
	waitFor(t, "the breaker opens after SIGKILL", func() bool { return l.BreakerState() != "closed" })
	reset("restarted")
	srv.Restart(t)
	waitFor(t, "checks succeed after the restart", func() bool { return okSince.Load() > 100 })

	reset("stopped")
	srv.Pause(t)
	waitFor(t, "checks fail while the server is stopped", func() bool { return failed.Load() > 0 })
	waitFor(t, "the breaker opens after SIGSTOP", func() bool { return l.BreakerState() != "closed" })
	reset("continued")
	srv.Resume(t)
	waitFor(t, "checks succeed after SIGCONT", func() bool { return okSince.Load() > 100 })
	waitFor(t, "the breaker closes", func() bool { return l.BreakerState() == "closed" })
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
// fails when the write timeout gives the connection up.
func TestDialHungServer(t *testing.T) {
	srv := redistest.StartServer(t)
	s := dialStore(t, srv.URL()+"?write_timeout=300ms&dial_timeout=300ms")
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
		if err == nil {
			t.Fatal("Eval on a stopped server succeeded")
		}
		t.Logf("Eval without deadline on a stopped server: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Eval without deadline on a stopped server still waits after 30s")
	}
	srv.Resume(t)
	waitFor(t, "a check succeeds after SIGCONT", func() bool {
		_, err := s.Eval(ctx, check, []ratelimit.Op{op})
		return err == nil
	})
}

// TestDialCheckWhileReconnectingToHungServer: a check returns by its
// deadline while a connection to a stopped server is being re-established
// for a call with a later deadline. rueidis dials one connection per server
// at a time and every other call waits for that attempt, ignoring its own
// context, until the attempt ends: at the dial timeout, as the handshake on
// a connection the stopped server's kernel accepted never gets an answer (a
// Cluster's or a Sentinel's refresh dials so, with no deadline at all). The
// store gives the attempt up at the waiting check's deadline.
//
// The check's deadline is 100ms and it must return within a minute while
// the server is still stopped; the dial timeout here is ten minutes, which
// the old code waited for (5s by default). A minute is no scheduling
// margin: it leaves a loaded machine 600 times the deadline.
func TestDialCheckWhileReconnectingToHungServer(t *testing.T) {
	srv := redistest.StartServer(t)
	o, err := ParseURL(srv.URL() + "?dial_timeout=10m&write_timeout=10m")
	if err != nil {
		t.Fatal(err)
	}
	o.PipelineMultiplex = -1 // one connection, which the check must use (rueidis picks one of several at random)
	var armed atomic.Bool    // signal the dials after SIGSTOP
	dialing := make(chan struct{}, 1)
	o.DialCtxFn = func(ctx context.Context, addr string, nd *net.Dialer, _ *tls.Config) (net.Conn, error) {
		if armed.Load() {
			select {
			case dialing <- struct{}{}:
			default:
			}
		}
		return nd.DialContext(ctx, "tcp", addr)
	}
	s, err := Open(ctx, Options{Client: o, RequireConnection: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	k := newKeyer(t)
	op := []ratelimit.Op{k.count("a", 1<<40, 1)}
	const timeout = 100 * time.Millisecond
	check := func() error {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := s.Eval(cctx, ratelimit.ModeCheck, op)
		return err
	}
	if err := check(); err != nil {
		t.Fatal(err)
	}

	// The server closes the store's connection, then stops: the next call
	// dials it again, and the handshake gets no answer.
	kill := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer func() { _ = kill.Close() }()
	if err := kill.ClientKillByFilter(ctx, "TYPE", "normal").Err(); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	armed.Store(true)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	// Calls with a 10-minute deadline, until the test ends: one of them
	// dials, under its own context.
	slowCtx, stopSlow := context.WithCancel(ctx)
	slow := make(chan struct{})
	go func() {
		defer close(slow)
		for slowCtx.Err() == nil {
			lctx, cancel := context.WithTimeout(slowCtx, 10*time.Minute)
			_, _ = s.Eval(lctx, ratelimit.ModeCheck, op)
			cancel()
		}
	}()
	defer func() {
		// Resumed first: a call that waits for the attempt, ignoring its
		// context (the old code), returns once the server answers.
		if !resumed {
			srv.Resume(t)
			resumed = true
		}
		stopSlow()
		<-slow
	}()
	select {
	case <-dialing:
	case <-time.After(30 * time.Second):
		t.Fatal("no connection attempt 30s after SIGSTOP")
	}
	done := make(chan error, 1)
	go func() { done <- check() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a check on a stopped server succeeded")
		}
		t.Logf("check during the connection attempt: %v", err)
	case <-time.After(time.Minute):
		t.Fatalf("a check with a %v deadline still waits after a minute for a connection attempt to a stopped server", timeout)
	}
	srv.Resume(t)
	resumed = true
	waitFor(t, "a check succeeds after SIGCONT", func() bool { return check() == nil })
}

// TestDialClusterCheckWhileRefreshDialsHungMaster is the failover drill's
// case: the key's master of a Cluster stops, and rueidis' topology refresh
// (mux.Version, with no deadline) dials it again while checks wait for that
// attempt. Each check, with a 100ms deadline, must return within a minute while
// the master is still stopped; before, checks waited for the dial timeout
// (ten minutes here, 5s by default). (Why a minute is no timing margin: see
// TestDialCheckWhileReconnectingToHungServer.)
func TestDialClusterCheckWhileRefreshDialsHungMaster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	url := "redis://" + nodes[0].Addr + "?addr=" + nodes[1].Addr + "&addr=" + nodes[2].Addr + "&dial_timeout=10m&write_timeout=10m"
	s := dialStore(t, url)
	k := newKeyer(t)
	op := []ratelimit.Op{k.count("a", 1<<40, 1)}
	const timeout = 100 * time.Millisecond
	check := func() error {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := s.Eval(cctx, ratelimit.ModeCheck, op)
		return err
	}
	waitFor(t, "a check succeeds", func() bool { return check() == nil })
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}})
	defer func() { _ = cc.Close() }()
	m, err := cc.MasterForKey(ctx, op[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	var master *redistest.Server
	for _, n := range nodes {
		if n.Addr == m.Options().Addr {
			master = n
		}
	}
	if master == nil {
		t.Fatalf("no node is %s", m.Options().Addr)
	}
	// The master closes the store's connections, then stops: rueidis
	// refreshes the topology and dials it again; nothing answers.
	if err := m.ClientKillByFilter(ctx, "TYPE", "normal").Err(); err != nil {
		t.Fatal(err)
	}
	master.Pause(t)
	defer master.Resume(t)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		done := make(chan error, 1)
		go func() { done <- check() }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a check on a stopped master succeeded")
			}
		case <-time.After(time.Minute):
			t.Fatalf("a check with a %v deadline still waits after a minute on a stopped master", timeout)
		}
	}
}
