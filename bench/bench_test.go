package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/ratekit/ratekit/bench/internal/redisinfo"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	ikeys "github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/redistest"
)

// keys is how many identifiers every contender rotates through.
const keys = 1000

// checker is one contender's check of identifier i%keys; it reports whether
// the check allowed.
type checker func(ctx context.Context, i int) (bool, error)

// env is what a contender is built on: a fresh client per benchmark, whose
// hook counts round trips, and a key prefix of its own.
type env struct {
	client redis.UniversalClient // *redis.Client; a *redis.ClusterClient in the cluster groups
	url    string                // the same Redis as a redisstore.Dial URL
	prefix string
	trips  *redistest.RoundTrips // the client's hook; conn rows count their writes in it
}

// A contender is one row of the table. Rows of one group measure the same
// work (one limit on Redis, five limits on Redis, one limit in memory), so
// ratekit's rows are compared with the best peer row of their group. A peer's
// name never starts with "ratekit".
type contender struct {
	name  string
	group string
	// banned rows measure a client that is already banned: the harness
	// proof of TestContendersAgree does not apply to them.
	banned bool
	build  func(t testing.TB, e env, limit int) checker
}

// Groups, in table order; each is the first element of a benchmark's name,
// which is how cmd/benchtable finds the rows to compare.
const (
	groupRedis1   = "redis_1limit"
	groupRedis5   = "redis_5limits"
	groupCluster1 = "redis_cluster_1limit"
	groupCluster5 = "redis_cluster_5limits"
	groupMemory   = "memory_1limit"
)

// cluster reports whether the contender runs on the test Redis Cluster
// (RATEKIT_TEST_REDIS_CLUSTER) rather than the standalone server.
func (ct contender) cluster() bool { return ct.group == groupCluster1 || ct.group == groupCluster5 }

// fiveLimits reports whether the contender checks five limits per check.
func (ct contender) fiveLimits() bool { return ct.group == groupRedis5 || ct.group == groupCluster5 }

var contenders = []contender{
	{name: "ratekit_1rule", group: groupRedis1, build: ratekit(1, redisStore)},
	{name: "ratekit_1rule_autopipeline", group: groupRedis1, build: ratekit(1, autoPipelineStore)},
	{name: "ratekit_1rule_conn", group: groupRedis1, build: ratekit(1, connStore)},
	{name: "ratekit_1rule_banned_client", group: groupRedis1, banned: true, build: ratekitBanned},
	{name: "ratekit_1rule_sliding_conn", group: groupRedis1, build: ratekitAlgorithm(ratelimit.SlidingWindow, connStore)},
	{name: "ratekit_1rule_token_conn", group: groupRedis1, build: ratekitAlgorithm(ratelimit.TokenBucket, connStore)},
	{name: "ulule", group: groupRedis1, build: ululeRedis(1)},
	{name: "redis_rate", group: groupRedis1, build: redisRate(1)},
	{name: "ratekit_5rules", group: groupRedis5, build: ratekit(5, redisStore)},
	{name: "ratekit_5rules_conn", group: groupRedis5, build: ratekit(5, connStore)},
	{name: "ulule_5calls", group: groupRedis5, build: ululeRedis(5)},
	{name: "redis_rate_5calls", group: groupRedis5, build: redisRate(5)},
	// The same work on a 3-master Redis Cluster: ratekit on go-redis'
	// ClusterClient (redisstore.New) and on redisstore.Dial's rueidis client,
	// the peers on the same ClusterClient.
	{name: "ratekit_1rule", group: groupCluster1, build: ratekit(1, redisStore)},
	{name: "ratekit_1rule_conn", group: groupCluster1, build: ratekit(1, connStore)},
	{name: "ulule", group: groupCluster1, build: ululeRedis(1)},
	{name: "redis_rate", group: groupCluster1, build: redisRate(1)},
	{name: "ratekit_5rules", group: groupCluster5, build: ratekit(5, redisStore)},
	{name: "ratekit_5rules_conn", group: groupCluster5, build: ratekit(5, connStore)},
	{name: "ulule_5calls", group: groupCluster5, build: ululeRedis(5)},
	{name: "redis_rate_5calls", group: groupCluster5, build: redisRate(5)},
	{name: "ratekit_memory", group: groupMemory, build: ratekit(1, memoryStore)},
	{name: "ulule_memory", group: groupMemory, build: ululeMemory},
}

func redisStore(t testing.TB, e env) ratelimit.Store { return redisstore.New(e.client) }

func autoPipelineStore(t testing.TB, e env) ratelimit.Store {
	c, ok := e.client.(*redis.Client)
	if !ok {
		t.Fatalf("autopipeline row on a %T, want a *redis.Client", e.client)
	}
	ap, err := c.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ap.Close() })
	return redisstore.New(ap)
}

// connStore is a Store from redisstore.Dial: a rueidis client, whose
// auto-pipelining writes the checks of concurrent callers together. Every
// write on its connections counts as a round trip (one write carries all the
// checks queued meanwhile); on a cluster that is per node, as for go-redis'
// node clients.
func connStore(t testing.TB, e env) ratelimit.Store {
	o, err := redisstore.ParseURL(e.url)
	if err != nil {
		t.Fatal(err)
	}
	o.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{c, e.trips}, nil
	}
	s, err := redisstore.Open(context.Background(), redisstore.Options{Client: o, RequireConnection: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// writeCounter counts the writes on a connection that carry a check as round
// trips; rueidis' own writes (the handshake, a health PING) are not checks.
type writeCounter struct {
	net.Conn
	trips *redistest.RoundTrips
}

var checkCommands = [][]byte{[]byte("INCRBY"), []byte("EVALSHA"), []byte("EVAL\r\n")}

func (c writeCounter) Write(b []byte) (int, error) {
	for _, cmd := range checkCommands {
		if bytes.Contains(b, cmd) {
			c.trips.N.Add(1)
			break
		}
	}
	return c.Conn.Write(b)
}

func memoryStore(testing.TB, env) ratelimit.Store { return ratelimit.NewMemoryStore() }

func identifiers() []ratelimit.Identifier {
	ids := make([]ratelimit.Identifier, keys)
	for i := range ids {
		ids[i] = ratelimit.Identifier{"user": "user:" + strconv.Itoa(i)}
	}
	return ids
}

func ratekitLimiter(t testing.TB, store ratelimit.Store, prefix string, rules []ratelimit.Rule) *ratelimit.Limiter {
	l, err := ratelimit.New(ratelimit.Config{Name: "bench", Store: store, KeyPrefix: prefix, Rules: rules, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func ratekit(n int, store func(testing.TB, env) ratelimit.Store) func(testing.TB, env, int) checker {
	return ratekitRules(n, ratelimit.FixedWindow, store)
}

// ratekitAlgorithm is one rule counted by alg: its cost beside the fixed
// window's ratekit_1rule_conn.
func ratekitAlgorithm(alg ratelimit.Algorithm, store func(testing.TB, env) ratelimit.Store) func(testing.TB, env, int) checker {
	return ratekitRules(1, alg, store)
}

func ratekitRules(n int, alg ratelimit.Algorithm, store func(testing.TB, env) ratelimit.Store) func(testing.TB, env, int) checker {
	return func(t testing.TB, e env, limit int) checker {
		rules := make([]ratelimit.Rule, n)
		for i := range rules {
			rules[i] = ratelimit.Rule{Name: fmt.Sprintf("rule_%d", i), Action: ratelimit.ActionLimit,
				Characteristics: []string{"user"}, Limit: int64(limit), Period: time.Hour, Algorithm: alg}
		}
		l := ratekitLimiter(t, store(t, e), e.prefix, rules)
		ids := identifiers()
		return func(ctx context.Context, i int) (bool, error) {
			r := l.Check(ctx, ids[i%keys])
			return r.Action == ratelimit.ActionAllow, r.Err
		}
	}
}

// ratekitBanned is a client hammering while banned: every identifier is
// driven over a limit of 1 with a one-hour ban before the clock starts.
func ratekitBanned(t testing.TB, e env, _ int) checker {
	l := ratekitLimiter(t, redisstore.New(e.client), e.prefix, []ratelimit.Rule{{Name: "banned", Action: ratelimit.ActionLimit,
		Characteristics: []string{"user"}, Limit: 1, Period: time.Hour, BanFor: time.Hour}})
	ids := identifiers()
	ctx := context.Background()
	for _, id := range ids {
		l.Check(ctx, id)
		if r := l.Check(ctx, id); r.Err != nil || !r.Blocked() {
			t.Fatalf("banning %v: %+v", id, r)
		}
	}
	return func(ctx context.Context, i int) (bool, error) {
		r := l.Check(ctx, ids[i%keys])
		return r.Action == ratelimit.ActionAllow, r.Err
	}
}

// ululeRedis makes n limits as n ulule limiters, one call each.
func ululeRedis(n int) func(testing.TB, env, int) checker {
	return func(t testing.TB, e env, limit int) checker {
		ls := make([]*ulule.Limiter, n)
		for j := range ls {
			store, err := ululeredis.NewStoreWithOptions(e.client, ulule.StoreOptions{Prefix: e.prefix + strconv.Itoa(j), MaxRetry: 0})
			if err != nil {
				t.Fatal(err)
			}
			ls[j] = ulule.New(store, ulule.Rate{Period: time.Hour, Limit: int64(limit)})
		}
		return ululeCheck(ls)
	}
}

func ululeMemory(t testing.TB, e env, limit int) checker {
	store := ululememory.NewStoreWithOptions(ulule.StoreOptions{Prefix: e.prefix, CleanUpInterval: time.Hour})
	return ululeCheck([]*ulule.Limiter{ulule.New(store, ulule.Rate{Period: time.Hour, Limit: int64(limit)})})
}

func ululeCheck(ls []*ulule.Limiter) checker {
	names := userKeys()
	return func(ctx context.Context, i int) (bool, error) {
		ok := true
		for _, l := range ls {
			r, err := l.Get(ctx, names[i%keys])
			if err != nil {
				return false, err
			}
			ok = ok && !r.Reached
		}
		return ok, nil
	}
}

// redisRate makes n limits as n redis_rate calls on n keys.
func redisRate(n int) func(testing.TB, env, int) checker {
	return func(t testing.TB, e env, limit int) checker {
		l := redis_rate.NewLimiter(e.client)
		lim := redis_rate.Limit{Rate: limit, Burst: limit, Period: time.Hour}
		names := make([][]string, n)
		for j := range names {
			names[j] = userKeys()
			for k := range names[j] {
				names[j][k] = e.prefix + strconv.Itoa(j) + ":" + names[j][k]
			}
		}
		return func(ctx context.Context, i int) (bool, error) {
			ok := true
			for j := range names {
				r, err := l.Allow(ctx, names[j][i%keys], lim)
				if err != nil {
					return false, err
				}
				ok = ok && r.Allowed > 0
			}
			return ok, nil
		}
	}
}

// userKeys are the peers' identifiers, built once so that no contender pays
// for formatting them.
func userKeys() []string {
	names := make([]string, keys)
	for i := range names {
		names[i] = "user:" + strconv.Itoa(i)
	}
	return names
}

// newEnv returns a fresh client of the standalone test server, or of the test
// cluster, and the hook that counts its round trips.
func newEnv(t testing.TB, cluster bool) (env, *redistest.RoundTrips) {
	h := &redistest.RoundTrips{}
	e := env{prefix: redistest.Prefix(t), trips: h}
	if cluster {
		e.url = redistest.ClusterURL(t)
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 redistest.ClusterAddrs(t),
			ContextTimeoutEnabled: true,
			PoolSize:              128, // per node
			// A hook on each node's client: a pipeline sent to two nodes
			// is two round trips, as it is for the rueidis rows.
			NewClient: func(o *redis.Options) *redis.Client {
				n := redis.NewClient(o)
				n.AddHook(checkTrips{h})
				return n
			},
		})
		t.Cleanup(func() { _ = c.Close() })
		e.client = c
		t.Cleanup(func() { dropKeys(t, e) })
		return e, h
	}
	e.url = redistest.URL(t)
	opt, err := redis.ParseURL(e.url)
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true // as recommended for ratekit: the limiter then needs no guard goroutine
	opt.PoolSize = 128               // above 64 callers, so that no contender waits for a connection
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(h)
	e.client = c
	t.Cleanup(func() { dropKeys(t, e) })
	return e, h
}

// dropKeys deletes e's keys, when its test or benchmark ends: every benchmark
// then starts on the same Redis. Kept, the keys of every contender and round
// before (a thousand per limit, for an hour) made the Redis of a group's last
// rows, its peers', hold more than that of its first rows, ratekit's.
func dropKeys(t testing.TB, e env) {
	ctx := context.Background()
	match := "*" + ikeys.GlobEscape(e.prefix) + "*"
	err := eachServer(ctx, e.client, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, match, 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		// One UNLINK a key: a cluster master's keys are in many slots.
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.Unlink(ctx, k)
			}
			return nil
		})
		return err
	})
	if err != nil {
		t.Errorf("deleting the keys of %s: %v", e.prefix, err)
	}
}

// eachServer runs fn on the standalone server of c, or on every master of a
// cluster.
func eachServer(ctx context.Context, c redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	default:
		return fmt.Errorf("no servers of a %T", c)
	}
}

// checkTrips is the round-trip hook of a cluster node's client. It counts
// only commands and pipelines that carry a check, as writeCounter does: a
// ClusterClient also sends its own (CLUSTER SLOTS when it reloads the slot
// map, once a minute; SCRIPT LOAD to every master), which no check asked for.
type checkTrips struct{ trips *redistest.RoundTrips }

var _ redis.Hook = checkTrips{}

func isCheck(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "evalsha", "eval", "incrby":
		return true
	}
	return false
}

// DialHook implements redis.Hook.
func (h checkTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h checkTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isCheck(cmd) {
			h.trips.N.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h checkTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, isCheck) {
			h.trips.N.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestContendersAgree proves the harness measures real limiting: every
// contender admits exactly the limit for one key, and each Redis contender
// makes one round trip per limit it checks (ratekit: one per check; on a
// cluster, one per stage, see fiveRuleStages).
func TestContendersAgree(t *testing.T) {
	for _, ct := range contenders {
		if ct.banned {
			continue
		}
		t.Run(ct.group+"/"+ct.name, func(t *testing.T) {
			e, rt := newEnv(t, ct.cluster())
			check := ct.build(t, e, 5)
			ctx := context.Background()
			check(ctx, 0) // warm the script cache (EVALSHA after the first EVAL)
			start := rt.N.Load()
			allowed := 0
			for range 9 {
				ok, err := check(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					allowed++
				}
			}
			if allowed != 4 {
				t.Fatalf("%s allowed %d of 9 after one earlier check, want 4 (limit 5)", ct.name, allowed)
			}
			want := int64(9)
			switch {
			case ct.group == groupMemory:
				want = 0
			case ct.fiveLimits() && !strings.HasPrefix(ct.name, "ratekit"):
				want = 45
			case ct.group == groupCluster5:
				// The 4 allowed checks take every stage; the 5 blocked
				// ones end with the first, which the first rule blocks.
				want = 4*fiveRuleStages(t, e) + 5
			}
			if n := rt.N.Load() - start; n != want {
				t.Fatalf("%s made %d round trips for 9 checks, want %d", ct.name, n, want)
			}
		})
	}
}

// fiveRuleStages is how many round trips ratekit's allowed five-rule check of
// identifier 0 takes on the cluster. Every rule may block, and each rule's
// counter has a slot of its own (its hash tag is the limiter, the rule and
// the identifier), so the store runs a stage per run of consecutive rules in
// one slot, so that nothing is charged past a block (docs/design.md, Redis
// and Redis Cluster); a blocked check ends with the stage that blocked it.
func fiveRuleStages(t testing.TB, e env) int64 {
	t.Helper()
	ctx := context.Background()
	id := identifiers()[0]
	stages, last := int64(0), int64(-1)
	for i := range 5 {
		key, missing := ikeys.Counter(e.prefix, "bench", fmt.Sprintf("rule_%d", i), []string{"user"}, "", id)
		if missing != "" {
			t.Fatalf("identifier %v lacks %s", id, missing)
		}
		slot, err := e.client.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if slot != last {
			stages++
		}
		last = slot
	}
	return stages
}

// TestClusterKeysSpread proves that the cluster rows exercise every master:
// checking each identifier once leaves every contender's keys (one per limit
// and identifier) spread over the three masters of the test cluster.
func TestClusterKeysSpread(t *testing.T) {
	for _, ct := range contenders {
		if !ct.cluster() {
			continue
		}
		t.Run(ct.group+"/"+ct.name, func(t *testing.T) {
			e, _ := newEnv(t, true)
			warm(t, ct.build(t, e, 5), 16)
			c := e.client.(*redis.ClusterClient)
			var mu sync.Mutex
			perMaster := map[string]int{}
			err := c.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
				n := 0
				iter := m.Scan(ctx, 0, "*"+e.prefix+"*", 1000).Iterator()
				for iter.Next(ctx) {
					n++
				}
				mu.Lock()
				perMaster[m.Options().Addr] = n
				mu.Unlock()
				return iter.Err()
			})
			if err != nil {
				t.Fatal(err)
			}
			want := keys
			if ct.fiveLimits() {
				want = 5 * keys
			}
			total := 0
			for _, n := range perMaster {
				total += n
			}
			if len(perMaster) != 3 || total != want {
				t.Fatalf("%s left %d keys over %d masters %v, want %d over 3", ct.name, total, len(perMaster), perMaster, want)
			}
			for addr, n := range perMaster {
				// A third each on average; a fifth is far below any
				// fair spread of a thousand identifiers.
				if n < want/5 {
					t.Errorf("%s: master %s holds %d of %d keys, want at least a fifth", ct.name, addr, n, want)
				}
			}
		})
	}
}

// TestBannedClientIsBlocked proves the banned row measures blocked checks.
func TestBannedClientIsBlocked(t *testing.T) {
	e, _ := newEnv(t, false)
	check := ratekitBanned(t, e, 0)
	for i := range 2 * keys {
		if ok, err := check(context.Background(), i); ok || err != nil {
			t.Fatalf("check %d of a banned client: allowed %v, err %v", i, ok, err)
		}
	}
}

// warm checks every identifier once with that many concurrent callers: before
// a benchmark's clock starts, it makes every key exist and opens the
// connections the benchmark's callers need.
func warm(t testing.TB, check checker, callers int) {
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			for i := c; i < keys; i += callers {
				if _, err := check(context.Background(), i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// BenchmarkCheck measures every contender with one caller (c1) and with 64
// concurrent callers (c64), reporting checks/s, round trips per check, B/op
// and allocs/op. Limits are high enough that nothing is denied.
//
// The contenders of a group run one after the other at one concurrency, so
// that the ratios compare runs close in time on a shared machine.
func BenchmarkCheck(b *testing.B) {
	var groups []string
	for _, ct := range contenders {
		if !slices.Contains(groups, ct.group) {
			groups = append(groups, ct.group)
		}
	}
	for _, group := range groups {
		for _, callers := range []int{1, 64} {
			for _, ct := range contenders {
				if ct.group == group {
					benchmarkCheck(b, ct, callers)
				}
			}
		}
	}
}

func benchmarkCheck(b *testing.B, ct contender, callers int) {
	b.Run(fmt.Sprintf("%s/%s/c%d", ct.group, ct.name, callers), func(b *testing.B) { measure(b, ct, callers) })
}

// measure is one benchmark of ct. Every answer is checked: a contender whose
// check denied (or, for a banned row, allowed) would be measured doing other
// work than its group's, such as a failing peer answering fast, so the
// benchmark fails instead.
func measure(b *testing.B, ct contender, callers int) {
	want := !ct.banned
	e, rt := newEnv(b, ct.cluster())
	check := ct.build(b, e, 1<<30)
	ctx := context.Background()
	warm(b, check, callers)
	onRedis := ct.group != groupMemory
	var cpu0 float64
	if onRedis {
		cpu0 = redisCPU(b, e)
	}
	start := rt.N.Load()
	b.ReportAllocs()
	b.ResetTimer()
	if callers == 1 {
		for i := 0; i < b.N; i++ {
			ok, err := check(ctx, i)
			if err != nil {
				b.Fatal(err)
			}
			if ok != want {
				b.Fatalf("%s: check %d allowed %v, want %v", ct.name, i, ok, want)
			}
		}
	} else {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((callers + procs - 1) / procs)
		var caller atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			// Each caller walks the keys from its own offset: no
			// shared counter to contend on.
			i := int(caller.Add(1)) * 97
			for pb.Next() {
				i++
				ok, err := check(ctx, i)
				if err != nil {
					b.Error(err)
					return
				}
				if ok != want {
					b.Errorf("%s: check %d allowed %v, want %v", ct.name, i, ok, want)
					return
				}
			}
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
	b.ReportMetric(float64(rt.N.Load()-start)/float64(b.N), "rt/check")
	if onRedis {
		b.ReportMetric((redisCPU(b, e)-cpu0)*1e6/float64(b.N), "redis-us/check")
	}
}

// redisCPU returns the CPU seconds that the main threads of e's Redis servers
// (every master of the cluster) have used so far: the commands and the
// reading and answering of them, whatever form a contender sends.
func redisCPU(b *testing.B, e env) float64 {
	ctx := context.Background()
	var mu sync.Mutex
	total := 0.0
	add := func(ctx context.Context, c *redis.Client) error {
		cpu, err := redisinfo.MainThreadCPU(ctx, c)
		mu.Lock()
		total += cpu
		mu.Unlock()
		return err
	}
	if err := eachServer(ctx, e.client, add); err != nil {
		b.Fatal(err)
	}
	return total
}

// TestBenchmarkChecksAnswers proves that a benchmark fails rather than
// measure a contender answering other than its row says: denying where
// nothing may be denied (a peer that fails fast), or allowing on the banned
// row. testing.Benchmark returns an empty result for a failed benchmark.
func TestBenchmarkChecksAnswers(t *testing.T) {
	redistest.URL(t) // measure opens a client of the test server, as every row does
	bt := flag.Lookup("test.benchtime")
	old := bt.Value.String()
	if err := bt.Value.Set("20x"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bt.Value.Set(old) })
	answering := func(allowed bool) func(testing.TB, env, int) checker {
		return func(testing.TB, env, int) checker {
			return func(context.Context, int) (bool, error) { return allowed, nil }
		}
	}
	for _, tc := range []struct {
		name    string
		ct      contender
		succeed bool
	}{
		{"allows", contender{name: "allows", group: groupMemory, build: answering(true)}, true},
		{"denies", contender{name: "denies", group: groupMemory, build: answering(false)}, false},
		{"banned denies", contender{name: "banned", group: groupMemory, banned: true, build: answering(false)}, true},
		{"banned allows", contender{name: "banned", group: groupMemory, banned: true, build: answering(true)}, false},
	} {
		for _, callers := range []int{1, 64} {
			t.Run(fmt.Sprintf("%s/c%d", tc.name, callers), func(t *testing.T) {
				r := testing.Benchmark(func(b *testing.B) { measure(b, tc.ct, callers) })
				if ran := r.N > 0; ran != tc.succeed {
					t.Fatalf("benchmark ran %d checks, want it to succeed: %v", r.N, tc.succeed)
				}
			})
		}
	}
}

// TestEnvKeysDropped proves that every Redis row leaves no key behind, so
// that the rows after it start on the same Redis: a contender's keys exist
// while its test runs and are gone once it ends.
func TestEnvKeysDropped(t *testing.T) {
	for _, ct := range contenders {
		if ct.group == groupMemory {
			continue
		}
		t.Run(ct.group+"/"+ct.name, func(t *testing.T) {
			var prefix string
			t.Run("run", func(t *testing.T) {
				e, _ := newEnv(t, ct.cluster())
				prefix = e.prefix
				warm(t, ct.build(t, e, 5), 4)
				if n := countKeys(t, e.client, prefix); n == 0 {
					t.Fatalf("%s made no key of prefix %s", ct.name, prefix)
				}
			})
			var c redis.UniversalClient
			if ct.cluster() {
				c = redistest.ClusterClient(t)
			} else {
				c = redistest.Client(t)
			}
			if n := countKeys(t, c, prefix); n != 0 {
				t.Fatalf("%s left %d keys of prefix %s", ct.name, n, prefix)
			}
		})
	}
}

// countKeys counts the keys that hold prefix on c's servers.
func countKeys(t *testing.T, c redis.UniversalClient, prefix string) int64 {
	t.Helper()
	var n atomic.Int64
	err := eachServer(context.Background(), c, func(ctx context.Context, m *redis.Client) error {
		iter := m.Scan(ctx, 0, "*"+ikeys.GlobEscape(prefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			n.Add(1)
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return n.Load()
}
