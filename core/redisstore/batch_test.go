package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// randomBatch returns a batch of 1 to 6 checks of 1 to 4 ops on a few names
// of k, so that checks share keys: usual checks (the plain form on a Store
// from Dial), checks with bans, distinct counts, fractional costs, several
// limit rules (several stages on a cluster), and small limits that block.
func randomBatch(r *rand.Rand, k keyer, usual bool) [][]ratelimit.Op {
	batch := make([][]ratelimit.Op, 1+r.IntN(6))
	for e := range batch {
		ops := make([]ratelimit.Op, 1+r.IntN(4))
		for i := range ops {
			name := fmt.Sprint("n", r.IntN(5))
			limit := int64(2 + r.IntN(6))
			switch {
			case usual || r.IntN(3) > 0:
				ops[i] = k.count(name, limit, float64(1+r.IntN(2)))
			case r.IntN(2) == 0:
				ops[i] = k.distinct(name+":set", fmt.Sprint("m", r.IntN(4)), limit)
			default:
				ops[i] = k.count(name+":f", limit, 0.5+float64(r.IntN(2)))
			}
			if !usual && r.IntN(4) == 0 {
				ops[i] = banned(ops[i], time.Hour)
			}
			ops[i].Terminal = usual && i == len(ops)-1 || !usual && r.IntN(2) == 0
		}
		batch[e] = ops
	}
	return batch
}

// sameOutcomes fails unless a and b are the same outcomes, TTLs within a
// second (the two worlds' windows start at different moments).
func sameOutcomes(t *testing.T, step string, a, b []ratelimit.OpResult) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d outcomes, want %d", step, len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if d := x.TTL - y.TTL; d > time.Second || d < -time.Second {
			t.Fatalf("%s: op %d: TTL %v, want about %v", step, i, x.TTL, y.TTL)
		}
		x.TTL, y.TTL = 0, 0
		if x != y {
			t.Fatalf("%s: op %d: %+v, want %+v", step, i, a[i], b[i])
		}
	}
}

// rekey returns batch with k's keys in place of from's.
func rekey(batch [][]ratelimit.Op, from, to keyer) [][]ratelimit.Op {
	out := make([][]ratelimit.Op, len(batch))
	for e, ops := range batch {
		out[e] = append([]ratelimit.Op(nil), ops...)
		for i := range out[e] {
			op := &out[e][i]
			op.Key = to.key(nameOf(from, op.Key))
			if op.BanKey != "" {
				op.BanKey = banned(*op, op.BanFor).BanKey
			}
		}
	}
	return out
}

// TestEvalBatchEqualsEvals is a differential test: random batches applied
// with EvalBatch in one key space and as consecutive Evals in another give
// the same outcomes, and leave the same counts (read by a final peek of
// every key), on every target.
func TestEvalBatchEqualsEvals(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, _ redis.UniversalClient) {
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		r := rand.New(rand.NewPCG(seed, 26))
		ka, kb := newKeyer(t)+"a", newKeyer(t)+"b"
		for round := range 60 {
			mode := check
			if round%10 == 9 {
				mode = ratelimit.ModePeek
			}
			batch := randomBatch(r, ka, round%3 == 0)
			got, err := s.EvalBatch(ctx, mode, batch)
			if err != nil {
				t.Fatalf("round %d: EvalBatch: %v", round, err)
			}
			if len(got) != len(batch) {
				t.Fatalf("round %d: %d outcome lists for %d checks", round, len(got), len(batch))
			}
			for e, ops := range rekey(batch, ka, kb) {
				want := eval(t, s, mode, ops...)
				sameOutcomes(t, fmt.Sprintf("round %d (%s), check %d of %v", round, mode, e, batch), got[e], want)
			}
		}
		var peekA, peekB []ratelimit.Op
		for i := range 5 {
			for _, suffix := range []string{"", ":f"} {
				name := fmt.Sprint("n", i) + suffix
				peekA, peekB = append(peekA, ka.count(name, 1e9, 0)), append(peekB, kb.count(name, 1e9, 0))
			}
			name := fmt.Sprint("n", i, ":set")
			peekA, peekB = append(peekA, ka.distinct(name, "absent", 1e9)), append(peekB, kb.distinct(name, "absent", 1e9))
		}
		sameOutcomes(t, "final counts", eval(t, s, ratelimit.ModePeek, peekA...), eval(t, s, ratelimit.ModePeek, peekB...))
	})
}

// TestEvalBatchRoundTripsStandalone: a batch of five checks is one round
// trip on one server, in the plain form and as scripts, through Dial (its
// rueidis calls counted) and through go-redis (its pipelines counted).
func TestEvalBatchRoundTripsStandalone(t *testing.T) {
	rc := &recordingClient{}
	dialed := recordedStore(t, rc)
	c, h := privateClient(t)
	goredis := New(c)
	for _, tt := range []struct {
		name  string
		s     *Store
		trips func() int
	}{
		{"dial", dialed, rc.takeTrips},
		{"go-redis", goredis, func() int { return len(h.Take()) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := newKeyer(t)
			// Warm up: the first connection's handshake, the script cached.
			if _, err := tt.s.EvalBatch(ctx, check, [][]ratelimit.Op{{banned(k.count("warm", 100, 1), time.Hour)}}); err != nil {
				t.Fatal(err)
			}
			for _, form := range []struct {
				name string
				op   func(i int) ratelimit.Op
			}{
				{"plain", func(i int) ratelimit.Op { return terminal(k.count(fmt.Sprint("p", i), 100, 1)) }},
				{"script", func(i int) ratelimit.Op { return terminal(banned(k.count(fmt.Sprint("s", i), 100, 1), time.Hour)) }},
			} {
				batch := make([][]ratelimit.Op, 5)
				for i := range batch {
					batch[i] = []ratelimit.Op{k.count("shared"+form.name, 100, 1), form.op(i)}
				}
				tt.trips()
				outs, err := tt.s.EvalBatch(ctx, check, batch)
				if err != nil {
					t.Fatal(err)
				}
				if n := tt.trips(); n != 1 {
					t.Errorf("%s: %d round trips for 5 checks, want 1", form.name, n)
				}
				for i, out := range outs { // each check saw the shared counter's earlier charges
					if out[0].Count != float64(i+1) || out[1].Count != 1 {
						t.Errorf("%s: check %d: counts %v and %v, want %d and 1", form.name, i, out[0].Count, out[1].Count, i+1)
					}
				}
			}
		})
	}
}

// TestEvalBatchClusterStages: on a Cluster a batch costs as many round
// trips as its longest check has stages; a block ends its own check only,
// nothing is charged past it, and a check that touches a key an earlier
// check still has to write waits for it.
func TestEvalBatchClusterStages(t *testing.T) {
	scriptOnEveryMaster(t)
	rc := &recordingClient{}
	s := recordedStoreOn(t, redistest.ClusterURL(t), rc)
	c := redistest.ClusterClient(t)
	k := newKeyer(t)
	a := k.count("a", 100, 1)
	b := k.count(nameInOtherSlot(k, "b", a.Key), 100, 1)
	blocker := k.count(nameInOtherSlot(k, "blocker", a.Key, b.Key), 0, 1) // always over its limit
	var singles [][]ratelimit.Op
	for i := range 5 {
		singles = append(singles, []ratelimit.Op{terminal(k.count(fmt.Sprint("one", i), 100, 1))})
	}
	for _, tt := range []struct {
		name  string
		batch [][]ratelimit.Op
		trips int
	}{
		{"five single-rule checks: one round trip", singles, 1},
		{"five checks with bans: one round trip", func() [][]ratelimit.Op {
			out := rekey(singles, k, k+"ban")
			for i := range out {
				out[i][0] = banned(out[i][0], time.Hour)
			}
			return out
		}(), 1},
		{"a two-stage check among single ones: two round trips", append([][]ratelimit.Op{{terminal(a), b}}, singles...), 2},
	} {
		rc.takeTrips()
		if _, err := s.EvalBatch(ctx, check, tt.batch); err != nil {
			t.Fatal(err)
		}
		if n := rc.takeTrips(); n != tt.trips {
			t.Errorf("%s: %d round trips, want %d", tt.name, n, tt.trips)
		}
	}

	t.Run("a block ends its own check", func(t *testing.T) {
		bNow := count(t, c, b.Key)
		outs, err := s.EvalBatch(ctx, check, [][]ratelimit.Op{{terminal(blocker), b}, {terminal(a)}})
		if err != nil {
			t.Fatal(err)
		}
		expectOutcomes(t, "blocked", outs[0], over(1, time.Minute), skipped)
		if !outs[1][0].Evaluated || outs[1][0].Exceeded {
			t.Errorf("the next check: %+v, want counted and allowed", outs[1][0])
		}
		if got := count(t, c, b.Key); got != bNow {
			t.Errorf("b charged past the block: %d, was %d", got, bNow)
		}
	})

	t.Run("a later check on a key an earlier one writes in its second stage waits", func(t *testing.T) {
		bNow := count(t, c, b.Key)
		rc.takeTrips()
		outs, err := s.EvalBatch(ctx, check, [][]ratelimit.Op{{terminal(a), b}, {terminal(b)}})
		if err != nil {
			t.Fatal(err)
		}
		if n := rc.takeTrips(); n != 2 {
			t.Errorf("%d round trips, want 2", n)
		}
		if outs[0][1].Count != float64(bNow+1) || outs[1][0].Count != float64(bNow+2) {
			t.Errorf("b counted %v then %v, want %d then %d (in batch order)", outs[0][1].Count, outs[1][0].Count, bNow+1, bNow+2)
		}
	})
}

// count reads a counter key; 0 when absent.
func count(t *testing.T, c redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := c.Get(ctx, key).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return n
}

// TestEvalBatchRefusedPlainOp: a check in the plain form whose counter holds
// a fraction is evaluated again by the script; the checks after it in the
// batch that use the same counter see its charge, as consecutive checks do.
func TestEvalBatchRefusedPlainOp(t *testing.T) {
	for _, url := range []func(testing.TB) string{redistest.URL, redistest.ClusterURL} {
		s := dialStore(t, url(t))
		k := newKeyer(t)
		eval(t, s, check, k.count("f", 100, 0.5))
		outs, err := s.EvalBatch(ctx, check, [][]ratelimit.Op{
			{k.count("other", 100, 1), terminal(k.count("f", 100, 1))},
			{terminal(k.count("f", 100, 1))},
		})
		if err != nil {
			t.Fatal(err)
		}
		if outs[0][1].Count != 1.5 || outs[1][0].Count != 2.5 || outs[0][0].Count != 1 {
			t.Errorf("counts %v, %v, %v; want 1, 1.5, 2.5", outs[0][0].Count, outs[0][1].Count, outs[1][0].Count)
		}
	}
}

// TestEvalBatchInvalid: a batch with a NaN cost fails as a whole before
// anything is written; an empty batch and empty checks are fine.
func TestEvalBatchInvalid(t *testing.T) {
	s := dialStore(t, redistest.URL(t))
	k := newKeyer(t)
	ok := k.count("ok", 10, 1)
	bad := k.count("bad", 10, 1)
	bad.Cost = math.NaN()
	if _, err := s.EvalBatch(ctx, check, [][]ratelimit.Op{{ok}, {bad}}); err == nil {
		t.Fatal("a NaN cost was accepted")
	}
	if n := count(t, redistest.Client(t), ok.Key); n != 0 {
		t.Errorf("the batch that failed wrote %d", n)
	}
	outs, err := s.EvalBatch(ctx, check, [][]ratelimit.Op{nil, {ok}, {}})
	if err != nil || len(outs) != 3 || len(outs[0]) != 0 || len(outs[2]) != 0 || outs[1][0].Count != 1 {
		t.Fatalf("got %v, %v", outs, err)
	}
}

// TestEvalBatchScriptFlushed: after SCRIPT FLUSH (as after a restart or a
// failover) a batch of script calls is sent again as EVAL, in one more round
// trip, and counts as before; the next batch is one round trip again.
func TestEvalBatchScriptFlushed(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := &recordingClient{}
	s := recordedStoreOn(t, srv.URL(), rc)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	k := newKeyer(t)
	batch := [][]ratelimit.Op{
		{terminal(banned(k.count("a", 10, 1), time.Hour))},
		{k.count("a", 10, 1), terminal(banned(k.count("b", 10, 1), time.Hour))},
	}
	for i := 1; i <= 2; i++ {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		rc.take()
		outs, err := s.EvalBatch(ctx, check, batch)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := rc.take(), "EVALSHA EVALSHA EVAL EVAL"; got != want {
			t.Errorf("after flush: sent %q, want %q", got, want)
		}
		if a1, a2, b := outs[0][0].Count, outs[1][0].Count, outs[1][1].Count; a1 != float64(4*i-3) || a2 != float64(4*i-2) || b != float64(2*i-1) {
			t.Errorf("after flush %d: counts a %v, a %v, b %v", i, a1, a2, b)
		}
		rc.takeTrips()
		if _, err := s.EvalBatch(ctx, check, batch); err != nil {
			t.Fatal(err)
		}
		if n := rc.takeTrips(); n != 1 {
			t.Errorf("%d round trips once cached, want 1", n)
		}
	}
}

// TestEvalBatchHungServer: a batch on a server that never answers returns
// when its context ends (the Store is ContextBounded, so the Limiter runs it
// without a guard goroutine).
func TestEvalBatchHungServer(t *testing.T) {
	srv := redistest.StartServer(t)
	s := dialStore(t, srv.URL()+"?write_timeout=300ms&dial_timeout=300ms")
	k := newKeyer(t)
	batch := [][]ratelimit.Op{{k.count("a", 10, 1)}, {k.count("b", 10, 1)}}
	if _, err := s.EvalBatch(ctx, check, batch); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.EvalBatch(cctx, check, batch)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("EvalBatch on a stopped server with a deadline: %v, want DeadlineExceeded", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("EvalBatch on a stopped server still waits 30s after its deadline")
	}
}

// On a Cluster a master that does not answer fails only the checks of a
// batch with a key on it, each with its own error (a *ratelimit.BatchError);
// the checks on the master that answered are counted and reported, in the
// plain form, by script and in a check of two stages whose second stage is
// on the hung master. A private 2-master cluster, so that the shared one
// never stops, whose nodes wait a minute before they call the hung one
// failed (and the cluster down: the other master alone is no majority).
func TestEvalBatchHungMasterFailsItsChecksOnly(t *testing.T) {
	nodes := redistest.StartCluster(t, 2, "--cluster-node-timeout", "60000")
	s := dialStore(t, "redis://"+nodes[0].Addr+"?addr="+nodes[1].Addr)
	k := newKeyer(t)
	// names[i]: keys on nodes[i] (the first holds slots 0-8191)
	var names [2][]string
	for i := 0; len(names[0]) < 3 || len(names[1]) < 5; i++ {
		name := fmt.Sprint("n", i)
		n := slot(k.key(name)) * 2 / numSlots
		names[n] = append(names[n], name)
	}
	hung, up := names[0], names[1]
	batches := []struct {
		name  string
		batch [][]ratelimit.Op
		fails []bool // per check
	}{
		{"plain", [][]ratelimit.Op{
			{k.count(up[0], 10, 1)}, {k.count(hung[0], 10, 1)}, {k.count(up[1], 10, 1)},
		}, []bool{false, true, false}},
		{"script", [][]ratelimit.Op{
			{banned(terminal(k.count(hung[1], 10, 1)), time.Hour)}, {banned(terminal(k.count(up[2], 10, 1)), time.Hour)},
		}, []bool{true, false}},
		{"two stages, the second on the hung master", [][]ratelimit.Op{
			{terminal(k.count(up[3], 10, 1)), k.count(hung[2], 10, 1)}, {terminal(k.count(up[4], 10, 1))},
		}, []bool{true, false}},
	}
	// Warm: the slot table and both masters' connections.
	for _, b := range batches {
		if _, err := s.EvalBatch(ctx, check, b.batch); err != nil {
			t.Fatalf("%s, before the pause: %v", b.name, err)
		}
	}
	nodes[0].Pause(t)
	defer nodes[0].Resume(t)
	for _, b := range batches {
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		outs, err := s.EvalBatch(dctx, check, b.batch)
		cancel()
		var be *ratelimit.BatchError
		if !errors.As(err, &be) || len(be.Errs) != len(b.batch) {
			t.Errorf("%s: EvalBatch error %v, want a *ratelimit.BatchError for %d checks", b.name, err, len(b.batch))
			continue
		}
		for i, fails := range b.fails {
			if got := be.Errs[i] != nil; got != fails {
				t.Errorf("%s: check %d failed %v (%v), want %v", b.name, i, got, be.Errs[i], fails)
				continue
			}
			if !fails && (outs[i][0].Count != 2 || !outs[i][0].Evaluated) {
				t.Errorf("%s: check %d on the master that answers: %+v, want counted a second time", b.name, i, outs[i][0])
			}
		}
	}

	// Through go-redis (New on a ClusterClient) the checks go one by one:
	// those before the hung one stand.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[1].Addr}, ContextTimeoutEnabled: true})
	defer cc.Close()
	dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	outs, err := New(cc).EvalBatch(dctx, check, [][]ratelimit.Op{{k.count(up[0], 10, 1)}, {k.count(hung[0], 10, 1)}})
	var be *ratelimit.BatchError
	if !errors.As(err, &be) || be.Errs[0] != nil || be.Errs[1] == nil || outs[0][0].Count != 3 {
		t.Errorf("New on a ClusterClient: %v, %+v; want the first check counted a third time and the second failed", err, outs)
	}
}

// pastDeadline is a context whose deadline has passed before its timer ran:
// Err is still nil.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestWithDeadline: a call that failed once its deadline passed reports the
// deadline too, whatever the transport said (a connection attempt given up at
// that deadline closes the connection the call waits on), in each check of a
// batch; a call that failed in time keeps its own error.
func TestWithDeadline(t *testing.T) {
	closed := errors.New("use of closed network connection")
	done, cancel := context.WithTimeout(ctx, 0)
	defer cancel()
	<-done.Done()
	tests := []struct {
		name     string
		ctx      context.Context
		err      error
		deadline bool
	}{
		{"no error", done, nil, false},
		{"in time", ctx, closed, false},
		{"past the deadline", done, closed, true},
		{"already the deadline", done, fmt.Errorf("eval: %w", context.DeadlineExceeded), true},
		{"deadline passed, its timer not run yet", pastDeadline{ctx}, closed, true},
	}
	for _, tt := range tests {
		err := withDeadline(tt.ctx, tt.err)
		if got := errors.Is(err, context.DeadlineExceeded); got != tt.deadline {
			t.Errorf("%s: %v: is DeadlineExceeded %v, want %v", tt.name, err, got, tt.deadline)
		}
		if tt.err != nil && !errors.Is(err, tt.err) {
			t.Errorf("%s: %v lost %v", tt.name, err, tt.err)
		}
	}
	be := &ratelimit.BatchError{Errs: []error{nil, closed}}
	var got *ratelimit.BatchError
	if err := withDeadline(done, be); !errors.As(err, &got) || got != be || !errors.Is(be.Errs[1], context.DeadlineExceeded) || be.Errs[0] != nil {
		t.Errorf("batch: %v (%v), want the failed check's error with the deadline", err, be.Errs)
	}
}
