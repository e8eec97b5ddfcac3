package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
)

// TestFaults64Callers is the fault program of the hot path: 64 callers check
// without pause while a private Redis is SIGKILLed and restarted, then
// SIGSTOPped (it accepts TCP and never answers) and SIGCONTed. It asserts
// what must hold on any machine: no panic, every result during an outage is
// allow with Err set, while the breaker is open checks are answered without
// the network (store calls counted: only the background prober's), and checks
// succeed again after each return. Latencies per phase and the time from the
// store's return to the first successful check are printed (go test -v -run
// Faults), never asserted: they are figures, not a test.
func TestFaults64Callers(t *testing.T) {
	srv := redistest.StartServer(t)
	redis.SetLogger(quietRedis{})                // go-redis logs every failed dial of the outage
	calls := &redistest.RoundTrips{Record: true} // what the store sent, named when a window saw too many calls
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 128})
	client.AddHook(calls)
	t.Cleanup(func() { _ = client.Close() })
	const timeout, cooldown = 100 * time.Millisecond, 500 * time.Millisecond // the defaults
	closes := &closeCounter{}
	l, err := ratelimit.New(ratelimit.Config{
		Name:      "faults",
		Store:     redisstore.New(client),
		KeyPrefix: redistest.Prefix(t),
		Rules:     []ratelimit.Rule{basic("per_user")},
		Timeout:   timeout,
		Breaker:   ratelimit.BreakerConfig{Failures: 3, Cooldown: cooldown},
		Logger:    slog.New(closes),
	})
	if err != nil {
		t.Fatal(err)
	}

	var (
		phase   atomic.Value // string: the phase a check starts in
		mu      sync.Mutex
		lat     = map[string][]time.Duration{}
		okAfter atomic.Int64 // unix nanos of the first success after the store returned; 0 until then
		since   atomic.Int64 // unix nanos the store returned
		panics  atomic.Int64
		open    atomic.Int64 // checks answered by the open breaker
		bad     atomic.Value // first result that breaks the rules
		// Per caller, the checks it began and those that returned: a check
		// in flight is one begun and not yet returned.
		begun, ended [64]atomic.Int64
	)
	phase.Store("healthy")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			var mine []time.Duration
			ph := ""
			flush := func() {
				mu.Lock()
				lat[ph] = append(lat[ph], mine...)
				mu.Unlock()
				mine = mine[:0]
			}
			defer flush()
			for i := 0; ; i++ {
				// Callers pace themselves as requests arriving over a network
				// would: 64 goroutines spinning on answers of a microsecond would
				// starve each other of the CPU for whole scheduler slices, and the
				// figures would measure the scheduler instead of the limiter.
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Microsecond):
				}
				if p := phase.Load().(string); p != ph {
					flush()
					ph = p
				}
				start := time.Now()
				begun[g].Add(1)
				r := func() (r ratelimit.Result) {
					defer func() {
						if p := recover(); p != nil {
							panics.Add(1)
						}
					}()
					return l.Check(context.Background(), ratelimit.Identifier{"user": fmt.Sprint("u", g, "_", i%50)})
				}()
				ended[g].Add(1)
				mine = append(mine, time.Since(start))
				if errors.Is(r.Err, ratelimit.ErrCircuitOpen) {
					open.Add(1)
				}
				switch {
				case r.Err == nil && r.Info == nil:
					bad.CompareAndSwap(nil, fmt.Sprintf("%s: a result with neither info nor error: %+v", ph, r))
				case r.Err != nil && (r.Action != ratelimit.ActionAllow || r.Info != nil):
					bad.CompareAndSwap(nil, fmt.Sprintf("%s: a failed check must allow without info: %+v", ph, r))
				case r.Err == nil && since.Load() != 0:
					okAfter.CompareAndSwap(0, time.Now().UnixNano())
				}
			}
		})
	}
	during := func(name string, d time.Duration) {
		phase.Store(name)
		time.Sleep(d)
	}
	recovered := func(name string) time.Duration {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for okAfter.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no successful check within 30s of the store's return (breaker %s)", name, l.BreakerState())
			}
			time.Sleep(5 * time.Millisecond)
		}
		d := time.Duration(okAfter.Load() - since.Load())
		since.Store(0)
		okAfter.Store(0)
		return d
	}
	// openWindow checks that, once the breaker is open and the checks that were
	// in flight have ended, only the background prober reaches Redis. A check
	// whose answer came before the outage but which a loaded machine
	// descheduled before it recorded it closes the breaker late (by design: a
	// call that came back well says the store is well), and every caller then
	// calls the store until it opens again: a window that saw the breaker
	// close is measured again.
	openWindow := func(name string) {
		t.Helper()
		for try := 1; ; try++ {
			deadline := time.Now().Add(30 * time.Second)
			for l.BreakerState() == "closed" {
				if time.Now().After(deadline) {
					t.Fatalf("%s: the breaker did not open", name)
				}
				time.Sleep(time.Millisecond)
			}
			// Let the checks in flight when the breaker was seen open end:
			// each has made its store call by then (the client honours the
			// context, so a check returns only once its call has). A sleep of
			// a few timeouts was no bound on a loaded machine.
			var inFlight [len(begun)]int64
			for g := range begun {
				inFlight[g] = begun[g].Load()
			}
			deadline = time.Now().Add(30 * time.Second)
			for g := range ended {
				for ended[g].Load() < inFlight[g] {
					if time.Now().After(deadline) {
						t.Fatalf("%s: caller %d's check in flight when the breaker opened did not return within 30s", name, g)
					}
					time.Sleep(time.Millisecond)
				}
			}
			calls.Take()
			closed, from, answered, at := closes.n.Load(), calls.N.Load(), open.Load(), time.Now()
			time.Sleep(time.Second)
			n, budget := calls.N.Load()-from, 2+int64(time.Since(at)/(cooldown/4))
			sent := calls.Take()
			if closes.n.Load() != closed && try < 5 {
				t.Logf("%s: the breaker closed during the window (%d store calls): measuring again", name, n)
				continue
			}
			t.Logf("%s: %d checks answered by the open breaker and %d store calls in %v (prober budget %d)",
				name, open.Load()-answered, n, time.Since(at).Round(time.Millisecond), budget)
			if n > budget {
				t.Errorf("%s: %d store calls while the breaker was open; only the prober (at most %d) may call (breaker %s; sent: %s)",
					name, n, budget, l.BreakerState(), countNames(sent))
			}
			return
		}
	}

	during("healthy", time.Second)
	phase.Store("killed")
	srv.Stop()
	openWindow("killed")
	phase.Store("restarted")
	srv.Restart(t)
	since.Store(time.Now().UnixNano())
	killRecovery := recovered("restart")
	during("healthy again", time.Second)
	phase.Store("stopped")
	srv.Pause(t)
	openWindow("stopped")
	phase.Store("continued")
	srv.Resume(t)
	since.Store(time.Now().UnixNano())
	stopRecovery := recovered("SIGCONT")
	during("healthy at the end", time.Second)
	close(stop)
	wg.Wait()

	if n := panics.Load(); n != 0 {
		t.Errorf("%d checks panicked", n)
	}
	if b := bad.Load(); b != nil {
		t.Error(b)
	}
	t.Logf("first success after the restart: %v; after SIGCONT: %v (breaker cooldown %v, timeout %v)",
		killRecovery.Round(time.Millisecond), stopRecovery.Round(time.Millisecond), cooldown, timeout)
	var report strings.Builder
	for _, ph := range []string{"healthy", "killed", "restarted", "healthy again", "stopped", "continued", "healthy at the end"} {
		d := lat[ph]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
		fmt.Fprintf(&report, "\n  %-18s %8d checks  p50 %-10v p99 %-10v p99.9 %-10v max %v", ph, len(d),
			q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond), q(0.999).Round(time.Microsecond), d[len(d)-1].Round(time.Microsecond))
	}
	t.Logf("latency per phase (64 callers):%s", report.String())
	// On a loaded machine a few healthy checks can still miss the 100ms
	// timeout and trip the breaker late in the run; what matters is that it
	// closes again once Redis answers, through its prober.
	for deadline := time.Now().Add(30 * time.Second); l.BreakerState() != "closed"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("breaker at the end: %s 30s after the last check", l.BreakerState())
			break
		}
	}
}

// A Redis Cluster master that hangs fails open the checks with a key on it
// only: the breaker that its checks' timeouts open is that master's, so the
// checks on the other master are still counted and blocked, while those of
// the hung one, and a check with keys on both, fail open at once
// (ErrCircuitOpen: no store call, no timeout paid), until it answers again.
// With one breaker per limiter (before), the hung master's three timeouts
// turned every check of the limiter into a fail-open until it came back. A
// private 2-master cluster that calls no node failed for a minute, on each
// store a Cluster has: Dial's, and New's on a shared *redis.ClusterClient
// (whose slot table the store reads itself; before, its limiter had one
// breaker).
func TestClusterHungMasterOpensItsOwnBreaker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T, addrs []string) ratelimit.Store
	}{
		{"dial", func(t *testing.T, addrs []string) ratelimit.Store {
			s, err := redisstore.Dial(context.Background(), "redis://"+addrs[0]+"?addr="+addrs[1])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{"new_cluster_client", func(t *testing.T, addrs []string) ratelimit.Store {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			return redisstore.New(c)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := redistest.StartCluster(t, 2, "--cluster-node-timeout", "60000")
			testHungMasterOwnBreaker(t, tc.store(t, []string{nodes[0].Addr, nodes[1].Addr}), nodes)
		})
	}
}

func testHungMasterOwnBreaker(t *testing.T, store ratelimit.Store, nodes []*redistest.Server) {
	ctx := context.Background()
	var logs testlog.Buffer
	l, err := ratelimit.New(ratelimit.Config{Name: "edge", Store: store, KeyPrefix: redistest.Prefix(t), Timeout: 500 * time.Millisecond,
		Breaker: ratelimit.BreakerConfig{Failures: 3, Cooldown: 40 * time.Millisecond},
		Logger:  slog.New(slog.NewJSONHandler(&logs, nil)),
		Rules: []ratelimit.Rule{
			{Name: "per_user", Characteristics: []string{"user"}, Limit: 2, Period: time.Hour, Action: ratelimit.ActionLimit},
			{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 100, Period: time.Hour, Action: ratelimit.ActionLimit},
		}})
	if err != nil {
		t.Fatal(err)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr, nodes[1].Addr}})
	defer cc.Close()
	// on[i]: identifiers whose keys are all on nodes[i]; mixed: one key on each.
	var on [2][]ratelimit.Identifier
	var mixed ratelimit.Identifier
	for i := 0; len(on[0]) < 1 || len(on[1]) < 1 || mixed == nil; i++ {
		id := ratelimit.Identifier{"user": fmt.Sprint("u", i), "ip": fmt.Sprint("10.0.0.", i)}
		ks := l.Keys(id) // per_user's counter and ban, then per_ip's
		m0, m1 := redistest.MasterOf(t, cc, nodes, ks[0]), redistest.MasterOf(t, cc, nodes, ks[2])
		switch {
		case m0 != m1:
			mixed = id
		case m0 == nodes[0]:
			on[0] = append(on[0], id)
		default:
			on[1] = append(on[1], id)
		}
	}
	hung, healthy := on[0][0], on[1][0]
	for _, id := range []ratelimit.Identifier{hung, healthy, mixed} { // warm: the slot table, both connections
		if r := l.Check(ctx, id); r.Err != nil || r.Blocked() {
			t.Fatalf("before the pause: %s (%v)", describe(r), r.Err)
		}
	}
	// The store reads its slot table in the background; the masters' keys
	// have their own parts once it has.
	ps := store.(interface{ Partition(key string) int })
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p0, p1 := ps.Partition(l.Keys(hung)[0]), ps.Partition(l.Keys(healthy)[0])
		if p0 >= 0 && p1 >= 0 && p0 != p1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the keys of two masters are parts %d and %d 60s after the first check, want one each", p0, p1)
		}
	}
	nodes[0].Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			nodes[0].Resume(t)
		}
	}()
	for i := 0; i < 3; i++ { // three timeouts open the hung master's breaker
		if r := l.Check(ctx, hung); r.Err == nil || r.Blocked() {
			t.Fatalf("check %d on the hung master: %s (%v), want failed open", i, describe(r), r.Err)
		}
	}
	if got := l.BreakerState(); got != "open" {
		t.Fatalf("breaker %s after three timeouts on the hung master, want open", got)
	}
	for i, wantBlocked := range []bool{false, true, true} { // counts 2, 3, 4 of a limit of 2
		if r := l.Check(ctx, healthy); r.Err != nil || r.Blocked() != wantBlocked {
			t.Fatalf("check %d on the master that answers: %s (%v), want blocked %v", i, describe(r), r.Err, wantBlocked)
		}
		for what, id := range map[string]ratelimit.Identifier{"the hung master": hung, "both masters": mixed} {
			if r := l.Check(ctx, id); !errors.Is(r.Err, ratelimit.ErrCircuitOpen) || r.Blocked() {
				t.Fatalf("check %d with keys on %s: %s (%v), want failed open by the breaker, no store call", i, what, describe(r), r.Err)
			}
		}
	}
	if out := logs.String(); !strings.Contains(out, `"msg":"rate_limit_breaker_open"`) || !strings.Contains(out, `"node":"`+nodes[0].Addr+`"`) {
		t.Errorf("no breaker_open record names the hung master %s:\n%s", nodes[0].Addr, out)
	}
	nodes[0].Resume(t)
	resumed = true
	// The prober closes the breaker once the master answers; then the hung
	// master's checks count again, up to their limit.
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := l.Check(ctx, hung)
		if r.Err == nil && r.Blocked() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the check on the master that came back is not enforced within 60s: %s (%v), breaker %s", describe(r), r.Err, l.BreakerState())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := l.Check(ctx, mixed); r.Err != nil {
		t.Fatalf("the check with keys on both masters after the return: %s (%v)", describe(r), r.Err)
	}
	if got := l.BreakerState(); got != "closed" {
		t.Errorf("breaker %s after the master's return, want closed", got)
	}
}

// closeCounter is a slog.Handler that counts the breaker's closings.
type closeCounter struct{ n atomic.Int64 }

func (h *closeCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *closeCounter) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *closeCounter) WithGroup(string) slog.Handler            { return h }

func (h *closeCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "rate_limit_breaker_closed" {
		h.n.Add(1)
	}
	return nil
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// On a Redis Cluster, a master that does not answer fails open only the
// checks of a batch with a key on it: CheckBatch still enforces the checks
// on the masters that answer, and their breaker stays closed (the
// limiter's breaker per master opens for the hung one only). A private 2-master cluster,
// so that the shared one never stops, whose nodes wait a minute before they
// call the hung one failed (and the cluster down: one master is no majority).
func TestCheckBatchHungMasterFailsOpenItsChecksOnly(t *testing.T) {
	nodes := redistest.StartCluster(t, 2, "--cluster-node-timeout", "60000")
	ctx := context.Background()
	store, err := redisstore.Dial(ctx, "redis://"+nodes[0].Addr+"?addr="+nodes[1].Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	l, err := ratelimit.New(ratelimit.Config{Name: "edge", Store: store, KeyPrefix: redistest.Prefix(t), Timeout: 500 * time.Millisecond,
		Rules: []ratelimit.Rule{{Name: "per_user", Characteristics: []string{"user"}, Limit: 2, Period: time.Hour, Action: ratelimit.ActionLimit}}})
	if err != nil {
		t.Fatal(err)
	}
	// users[i]: identifiers whose counter is on nodes[i] (the first holds
	// slots 0-8191), as the cluster itself says.
	raw := redis.NewClient(&redis.Options{Addr: nodes[1].Addr})
	defer raw.Close()
	var users [2][]ratelimit.Identifier
	for i := 0; len(users[0]) < 1 || len(users[1]) < 2; i++ {
		id := ratelimit.Identifier{"user": fmt.Sprint("u", i)}
		s, err := raw.ClusterKeySlot(ctx, l.Keys(id)[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		users[s*2/16384] = append(users[s*2/16384], id)
	}
	reqs := []ratelimit.Request{{Limiter: l, Identifier: users[1][0]}, {Limiter: l, Identifier: users[0][0]}, {Limiter: l, Identifier: users[1][1]}}
	for _, r := range ratelimit.CheckBatch(ctx, reqs) { // warm: the slot table, both connections
		if r.Err != nil || r.Blocked() {
			t.Fatalf("before the pause: %s (%v)", describe(r), r.Err)
		}
	}
	nodes[0].Pause(t)
	defer nodes[0].Resume(t)
	for round, wantBlocked := range []bool{false, true, true} { // counts 2, 3, 4 of a limit of 2
		res := ratelimit.CheckBatch(ctx, reqs)
		if r := res[1]; r.Err == nil || r.Blocked() {
			t.Errorf("round %d: the check on the hung master: %s (%v), want failed open", round, describe(r), r.Err)
		}
		for _, i := range []int{0, 2} {
			if r := res[i]; r.Err != nil || r.Blocked() != wantBlocked {
				t.Errorf("round %d: check %d on the master that answers: %s (%v), want blocked %v", round, i, describe(r), r.Err, wantBlocked)
			}
		}
	}
	// Three failures in a row open the hung master's breaker only (see
	// TestClusterHungMasterOpensItsOwnBreaker): the checks on the other
	// master were enforced in every round, the last one included.
	if got := l.BreakerState(); got != "open" {
		t.Errorf("breaker %s, want open: the hung master's checks failed three times in a row", got)
	}
}

// countNames returns names, each once with how many times it occurs, in the
// order of their first occurrence: "evalsha x3, eval x1".
func countNames(names []string) string {
	var order []string
	n := map[string]int{}
	for _, s := range names {
		if n[s] == 0 {
			order = append(order, s)
		}
		n[s]++
	}
	var b strings.Builder
	for i, s := range order {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s x%d", s, n[s])
	}
	return b.String()
}
