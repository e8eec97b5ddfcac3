package redisstore

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

type tripHook = redistest.RoundTrips

// hookedCluster is a cluster client that records round trips as the caller
// sees them (one pipeline to several nodes in parallel is one) and per node.
type hookedCluster struct {
	*redis.ClusterClient
	all   *tripHook
	mu    sync.Mutex
	nodes map[string]*tripHook
}

func newHookedCluster(t testing.TB, addrs []string) *hookedCluster {
	t.Helper()
	h := &hookedCluster{
		ClusterClient: redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}),
		all:           &tripHook{Record: true},
		nodes:         map[string]*tripHook{},
	}
	t.Cleanup(func() { _ = h.Close() })
	h.AddHook(h.all)
	h.OnNewNode(func(c *redis.Client) {
		nh := &tripHook{Record: true}
		h.mu.Lock()
		h.nodes[c.Options().Addr] = nh
		h.mu.Unlock()
		c.AddHook(nh)
	})
	if err := h.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	h.takeAll()
	return h
}

// takeAll returns the caller-side trips and, per node address, the node trips.
func (h *hookedCluster) takeAll() ([]string, map[string][]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	per := map[string][]string{}
	for addr, nh := range h.nodes {
		if tr := nh.Take(); len(tr) > 0 {
			per[addr] = tr
		}
	}
	return h.all.Take(), per
}

// spread returns count ops on n different hash tags (a limit rule, a log rule
// with a ban, a distinct rule, in turn), all allowed.
// shadowed makes every op but the last non-terminal (shadow rules before a
// limit): a check that one stage evaluates.
func shadowed(ops []ratelimit.Op) []ratelimit.Op {
	for i := range len(ops) - 1 {
		ops[i].Terminal = false
	}
	return ops
}

func spread(k keyer, n int) []ratelimit.Op {
	ops := make([]ratelimit.Op, n)
	for i := range ops {
		name := fmt.Sprint("rule", i)
		switch i % 3 {
		case 0:
			ops[i] = terminal(k.count(name, 1e9, 1))
		case 1:
			ops[i] = banned(k.count(name, 1e9, 1), time.Hour)
		default:
			ops[i] = k.distinct(name, "m", 1e9)
		}
	}
	return ops
}

// privateClient returns a client of a private server (for tests that read
// server statistics or flush scripts) that records its round trips.
func privateClient(t *testing.T) (*redis.Client, *tripHook) {
	t.Helper()
	redistest.URL(t) // same skip rule as the shared server
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	h := &tripHook{Record: true}
	c.AddHook(h)
	return c, h
}

var cmdstatRe = regexp.MustCompile(`(?m)^cmdstat_(evalsha|eval):calls=(\d+)`)

// scriptCalls reads how many EVALSHA and EVAL a server has executed.
func scriptCalls(t testing.TB, c *redis.Client) (evalsha, eval int) {
	t.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cmdstatRe.FindAllStringSubmatch(info, -1) {
		n, _ := strconv.Atoi(m[2])
		if m[1] == "evalsha" {
			evalsha = n
		} else {
			eval = n
		}
	}
	return evalsha, eval
}

// TestOneRoundTripStandalone: any number of ops is one EVALSHA, counted by a
// client hook and by the server's own command statistics (a private server,
// so that no other test's commands are counted).
func TestOneRoundTripStandalone(t *testing.T) {
	c, h := privateClient(t)
	s, k := New(c), newKeyer(t)
	eval(t, s, check, spread(k, 1)...) // loads the script (EVALSHA, NOSCRIPT, EVAL)
	for _, n := range []int{1, 3, 10} {
		for _, mode := range []ratelimit.Mode{check, peek} {
			sha0, eval0 := scriptCalls(t, c)
			h.Take()
			out := eval(t, s, mode, spread(k, n)...)
			trips := h.Take()
			sha1, eval1 := scriptCalls(t, c)
			if fmt.Sprint(trips) != "[evalsha]" {
				t.Errorf("%d ops, %s: round trips %v, want one EVALSHA", n, mode, trips)
			}
			if sha1-sha0 != 1 || eval1 != eval0 {
				t.Errorf("%d ops, %s: server ran %d EVALSHA and %d EVAL, want 1 and 0", n, mode, sha1-sha0, eval1-eval0)
			}
			for i, o := range out {
				if !o.Evaluated || o.Exceeded {
					t.Fatalf("op %d: %+v", i, o)
				}
			}
		}
	}
}

// TestOneRoundTripCluster: ops in several slots are one pipeline, each node
// receiving at most one batch, when no limit op precedes an op of another
// slot (shadow rules before a limit, as here; see TestClusterStages for the
// rest); ops sharing a slot are one EVALSHA.
func TestOneRoundTripCluster(t *testing.T) {
	c := newHookedCluster(t, redistest.ClusterAddrs(t))
	s, k := New(c.ClusterClient), newKeyer(t)
	eval(t, s, check, spread(k, 10)...) // warm up: slot map, command info, script cache
	eval(t, s, check, spread(k, 1)...)
	c.takeAll()
	for _, n := range []int{1, 3, 10} {
		ops := shadowed(spread(k, n))
		nodes := map[string]bool{}
		for _, op := range ops {
			m, err := c.MasterForKey(ctx, op.Key)
			if err != nil {
				t.Fatal(err)
			}
			nodes[m.Options().Addr] = true
		}
		c.takeAll()
		eval(t, s, check, ops...)
		all, per := c.takeAll()
		want := "[pipeline[" + strings.TrimSuffix(strings.Repeat("evalsha,", groupsOf(s, ops)), ",") + "]]"
		if n == 1 {
			want = "[evalsha]"
		}
		if fmt.Sprint(all) != want {
			t.Errorf("%d ops: caller round trips %v, want %s", n, all, want)
		}
		if len(per) != len(nodes) {
			t.Errorf("%d ops on %d nodes: node round trips %v", n, len(nodes), per)
		}
		for addr, tr := range per {
			if len(tr) != 1 {
				t.Errorf("%d ops: node %s had %d round trips: %v", n, addr, len(tr), tr)
			}
		}
		if n == 10 && len(nodes) < 2 {
			t.Errorf("10 hash tags all on one node: %v", nodes)
		}
	}
	// One hash tag, several keys: one script, one EVALSHA.
	key := k.key("shared")
	ops := []ratelimit.Op{terminal(k.count("shared", 9, 1)), {Key: key + ":a", Limit: 9, Cost: 1, Period: time.Minute}, {Kind: ratelimit.OpDistinct, Key: key + ":b", Member: "m", Limit: 9, Cost: 1, Period: time.Minute}}
	eval(t, s, check, ops...)
	if all, _ := c.takeAll(); fmt.Sprint(all) != "[evalsha]" {
		t.Errorf("one slot: round trips %v, want one EVALSHA", all)
	}
}

func groupsOf(s *Store, ops []ratelimit.Op) int {
	var shards []shard
	for _, op := range ops {
		if sh := s.shardOf(op.Key); indexOf(shards, sh) < 0 {
			shards = append(shards, sh)
		}
	}
	return len(shards)
}

// nameInOtherSlot returns a name whose key is in none of the given keys' slots.
func nameInOtherSlot(k keyer, base string, avoid ...string) string {
	for i := 0; ; i++ {
		name := fmt.Sprint(base, i)
		if !slices.ContainsFunc(avoid, func(a string) bool { return slot(a) == slot(k.key(name)) }) {
			return name
		}
	}
}

// snapshot returns every key under the keyer's prefix with its DUMP.
func snapshot(t testing.TB, c redis.UniversalClient, k keyer) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, key := range keysUnder(t, c, string(k)) {
		m[key] = c.Dump(ctx, key).Val()
	}
	return m
}

// blockingCheck builds a check whose first op blocks and whose later ops, in
// other slots, would all write if they were charged past the block.
func blockingCheck(t testing.TB, s *Store, k keyer) []ratelimit.Op {
	t.Helper()
	block := terminal(k.count("block", 0, 1))
	var used []string
	name := func(base string) string {
		n := nameInOtherSlot(k, base, append(used, block.Key)...)
		used = append(used, k.key(n))
		return n
	}
	ops := []ratelimit.Op{
		block,
		k.count(name("pre"), 100, 0.5),                   // existing counter
		k.count(name("fresh"), 100, 2),                   // would be created
		k.distinct(name("set"), "y", 100),                // member would be added
		k.distinct(name("set_known"), "x", 100),          // member known
		banned(k.count(name("shadow"), 0, 1), time.Hour), // counter and ban would be created
		banned(k.count(name("banned"), 0, 1), time.Hour), // active ban
	}
	again := ops[2]
	again.Cost = 0.25
	ops = append(ops, again)
	// Pre-existing state, written through the store so it is what it writes.
	eval(t, s, check, k.count(nameOf(k, ops[1].Key), 100, 3))
	eval(t, s, check, k.distinct(nameOf(k, ops[3].Key), "x", 100))
	eval(t, s, check, k.distinct(nameOf(k, ops[4].Key), "x", 100))
	eval(t, s, check, ops[6], ops[6])
	return ops
}

func nameOf(k keyer, key string) string {
	return strings.TrimSuffix(strings.TrimPrefix(key, string(k)+"{"+string(k)), "}")
}

// clusterStore is a Store on the test cluster and a count of its round trips.
type clusterStore struct {
	name  string
	s     *Store
	trips func() int // round trips since the last call
}

// clusterStores returns a Store on the test cluster from New (a go-redis
// cluster client, its round trips counted by a hook) and one from Dial (its
// rueidis client's Do and DoMulti calls counted).
func clusterStores(t *testing.T) []clusterStore {
	scriptOnEveryMaster(t)
	c := newHookedCluster(t, redistest.ClusterAddrs(t))
	r := &recordingClient{}
	return []clusterStore{
		{"go-redis", New(c.ClusterClient), func() int { all, _ := c.takeAll(); return len(all) }},
		{"dial", recordedStoreOn(t, redistest.ClusterURL(t), r), r.takeTrips},
	}
}

// scriptOnEveryMaster loads the store's script on every master of the test
// cluster. One that has not run it yet (a test alone on a fresh cluster)
// answers NOSCRIPT, and the store sends the script again: a round trip more
// than the tests that count them expect.
func scriptOnEveryMaster(t *testing.T) {
	t.Helper()
	err := redistest.ClusterClient(t).ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.ScriptLoad(ctx, evaluateLua).Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestClusterNothingChargedPastABlock: an early op blocks; the later ops, in
// other slots, are never sent, so no other caller can ever see their charge
// (nothing to undo), and the check costs one round trip.
func TestClusterNothingChargedPastABlock(t *testing.T) {
	for _, cs := range clusterStores(t) {
		t.Run(cs.name, func(t *testing.T) {
			c := redistest.ClusterClient(t)
			s, k := cs.s, newKeyer(t)
			ops := blockingCheck(t, s, k)
			before := snapshot(t, c, k)
			cs.trips()
			out := eval(t, s, check, ops...)
			expectOutcomes(t, "blocked", out, over(1, time.Minute), skipped, skipped, skipped, skipped, skipped, skipped, skipped)
			if n := cs.trips(); n != 1 {
				t.Errorf("%d round trips, want one (the blocking op's stage)", n)
			}
			after := snapshot(t, c, k)
			delete(after, ops[0].Key) // the blocking counter is rightly charged
			delete(before, ops[0].Key)
			if fmt.Sprint(before) != fmt.Sprint(after) {
				t.Fatalf("state changed past the block:\nbefore %q\nafter  %q", before, after)
			}

			// A peek writes nothing: one round trip for every shard, the same verdict.
			cs.trips()
			expectOutcomes(t, "peek", eval(t, s, ratelimit.ModePeek, ops...), over(1, time.Minute), skipped)
			if n := cs.trips(); n != 1 {
				t.Errorf("peek: %d round trips, want one", n)
			}
		})
	}
}

// TestClusterStages: a check runs in as few stages as sequential semantics
// allow: ops before a terminal op, and ops of the terminal op's own shard,
// share its round trip; an op of another shard after it waits for its verdict.
func TestClusterStages(t *testing.T) {
	for _, cs := range clusterStores(t) {
		t.Run(cs.name, func(t *testing.T) {
			s, k := cs.s, newKeyer(t)
			a := k.count("a", 100, 1)
			b := k.count(nameInOtherSlot(k, "b", a.Key), 100, 1)
			ba := banned(a, time.Hour) // not the plain form on a Store from Dial
			for _, tt := range []struct {
				name string
				ops  []ratelimit.Op
				want int
			}{
				{"log rules only: one stage", []ratelimit.Op{a, b}, 1},
				{"shadow then limit: one stage", []ratelimit.Op{b, terminal(a)}, 1},
				{"shadow then banning limit: one stage", []ratelimit.Op{b, terminal(ba)}, 1},
				{"limit then another shard: two stages", []ratelimit.Op{terminal(a), b}, 2},
				{"limit, another shard, its own shard again: three stages", []ratelimit.Op{terminal(a), terminal(b), a}, 3},
			} {
				cs.trips()
				eval(t, s, check, tt.ops...)
				if n := cs.trips(); n != tt.want {
					t.Errorf("%s: %d round trips, want %d", tt.name, n, tt.want)
				}
			}
		})
	}
}

// TestClusterStagesPlain: on a Store from Dial, a stage the plain form can
// evaluate goes in it, not as a script: a check of limit rules in different
// slots, one stage each, is INCRBY per rule (PEXPIRE NX and PTTL too until
// the Store knows the window), and a block still ends it.
func TestClusterStagesPlain(t *testing.T) {
	d := &recordingClient{}
	s, k := recordedStoreOn(t, redistest.ClusterURL(t), d), newKeyer(t)
	a := terminal(k.count("a", 2, 1))
	b := terminal(k.count(nameInOtherSlot(k, "b", a.Key), 100, 1))
	c := terminal(k.count(nameInOtherSlot(k, "c", a.Key, b.Key), 100, 1))
	for _, tt := range []struct {
		name, sent string
		trips      int
		want       []want
	}{
		{"first", "INCRBY PEXPIRE PTTL INCRBY PEXPIRE PTTL INCRBY PEXPIRE PTTL", 3, []want{ok(1, time.Minute), ok(1, time.Minute), ok(1, time.Minute)}},
		{"second", "INCRBY INCRBY INCRBY", 3, []want{ok(2, time.Minute), ok(2, time.Minute), ok(2, time.Minute)}},
		{"a blocks", "INCRBY", 1, []want{over(3, time.Minute), skipped, skipped}},
	} {
		d.take()
		d.takeTrips()
		expectOutcomes(t, tt.name, eval(t, s, check, a, b, c), tt.want...)
		if got, trips := d.take(), d.takeTrips(); got != tt.sent || trips != tt.trips {
			t.Errorf("%s: sent %q in %d round trips, want %q, a stage a trip", tt.name, got, trips, tt.sent)
		}
	}
	for key, want := range map[string]int{a.Key: 3, b.Key: 2, c.Key: 2} {
		if got, err := redistest.ClusterClient(t).Get(ctx, key).Int(); err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d (nothing charged past the block)", key, got, err, want)
		}
	}
}

// TestNoScriptFallback: after SCRIPT FLUSH (as after a restart or failover)
// checks still work, single calls and pipelines alike. Private servers, so that flushing disturbs no other test.
func TestNoScriptFallback(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		c, h := privateClient(t)
		s, k := New(c), newKeyer(t)
		for i := 1; i <= 3; i++ {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			h.Take()
			expectOutcomes(t, "after flush", eval(t, s, check, spread(k, 3)...), ok(float64(2*i-1), time.Minute))
			if tr := h.Take(); fmt.Sprint(tr) != "[evalsha eval]" {
				t.Errorf("round trips %v, want EVALSHA then EVAL", tr)
			}
			eval(t, s, check, spread(k, 3)...)
			if tr := h.Take(); fmt.Sprint(tr) != "[evalsha]" {
				t.Errorf("round trips %v, want EVALSHA once cached", tr)
			}
		}
	})
	t.Run("cluster", func(t *testing.T) {
		c := newHookedCluster(t, startCluster(t))
		s, k := New(c.ClusterClient), newKeyer(t)
		flush := func() {
			t.Helper()
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			c.takeAll()
		}
		flush()
		ops := shadowed(spread(k, 6))
		expectOutcomes(t, "after flush", eval(t, s, check, ops...), ok(1, time.Minute), ok(1, time.Minute), ok(1, time.Minute))
		if all, _ := c.takeAll(); len(all) != 2 || !strings.Contains(all[0], "evalsha") || !strings.Contains(all[1], "pipeline[eval") {
			t.Errorf("round trips %v, want a pipeline of EVALSHA then one of EVAL", all)
		}
		ops = blockingCheck(t, s, k)
		flush()
		expectOutcomes(t, "blocked after flush", eval(t, s, check, ops...), over(1, time.Minute), skipped, skipped)
		if all, _ := c.takeAll(); len(all) != 2 {
			t.Errorf("round trips %v, want the blocking stage's EVALSHA then EVAL", all)
		}
	})
}

// startCluster starts a private 3-master Redis Cluster (for tests that flush
// or break it) and returns its addresses, each master owning a third of the
// slots in order. It runs where the shared test cluster is configured, and
// needs redis-server on PATH. redistest.StartCluster holds what a private
// cluster needs once: its nodes try another port when the one they found
// free was taken before they bound it.
func startCluster(t *testing.T) []string {
	t.Helper()
	redistest.ClusterAddrs(t)
	var addrs []string
	for _, n := range redistest.StartCluster(t, 3) {
		addrs = append(addrs, n.Addr)
	}
	return addrs
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 30*time.Second, what, cond)
}

// waitWithin polls cond until it holds, failing the test after within.
func waitWithin(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
