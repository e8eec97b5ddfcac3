package redisstore

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	ikeys "github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/redistest"
)

func TestCRC16(t *testing.T) {
	// The check value of CRC-16/XMODEM, and the examples of the cluster spec.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]int{
		"":                      0,
		"foo":                   12182,
		"{user1000}.following":  slot("user1000"),
		"{user1000}.followers":  slot("user1000"),
		"foo{}{bar}":            slot("foo{}{bar}"),
		"foo{{bar}}zap":         slot("{bar"),
		"foo{bar}{zap}":         slot("bar"),
		"ratekit:rl:{a:b:c=d}x": slot("a:b:c=d"),
	} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestSlotMatchesRedis compares slot with CLUSTER KEYSLOT on the real cluster.
func TestSlotMatchesRedis(t *testing.T) {
	c := redistest.ClusterClient(t)
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"", "a", "{", "}", "{}", "{}x", "x{}", "{a}{b}", "a{b", "a}b{c}d", "{日本}", "ratekit:rl:{l:r:ip=2001%3Adb8%3A%3A1}:ban"}
	for range 200 {
		b := make([]byte, rng.IntN(24))
		for i := range b {
			b[i] = "ab{}:%\x00\xff"[rng.IntN(8)]
		}
		keys = append(keys, string(b))
	}
	for _, key := range keys {
		want, err := c.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := slot(key); int64(got) != want {
			t.Errorf("slot(%q) = %d, CLUSTER KEYSLOT = %d", key, got, want)
		}
	}
}

// TestClusterKeyCompatibility runs a limiter whose identifiers hold braces,
// colons and IPv6 addresses on the cluster: no CROSSSLOT, and each counter
// shares its slot with its ban.
func TestClusterKeyCompatibility(t *testing.T) {
	c := redistest.ClusterClient(t)
	prefix := redistest.Prefix(t)
	rules := []ratelimit.Rule{
		{Name: "by_ip", Action: ratelimit.ActionLimit, Characteristics: []string{"ip"}, Limit: 2, Period: time.Minute, BanFor: time.Hour},
		{Name: "by_ip_path", Characteristics: []string{"ip", "path"}, Limit: 100, Period: time.Minute, Action: ratelimit.ActionLog, BanFor: time.Hour},
		{Name: "users_per_ip", Action: ratelimit.ActionLimit, Characteristics: []string{"ip"}, CountDistinct: "user", Limit: 100, Period: time.Minute},
	}
	l, err := ratelimit.New(ratelimit.Config{Name: "compat", Store: New(c), Rules: rules, KeyPrefix: prefix, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ids := []ratelimit.Identifier{
		{"ip": "2001:db8::1", "path": "/a:b", "user": "{u}"},
		{"ip": "[2001:db8::1]:443", "path": "/{x}/y", "user": "u:1"},
		{"ip": "::ffff:192.0.2.1", "path": "}{", "user": "}"},
		{"ip": "{evil}", "path": "{", "user": "{"},
		{"ip": "a}b{c", "path": "}", "user": "a}b{c"},
		{"ip": "fe80::1%eth0", "path": strings.Repeat("{:}", 100), "user": ""},
	}
	for i, id := range ids {
		for n := 1; n <= 3; n++ {
			r := l.Check(ctx, id)
			if r.Err != nil {
				t.Fatalf("id %d check %d: %v", i, n, r.Err)
			}
			if want := n > 2; r.Blocked() != want || len(r.Evaluations) != 3-2*btoi(want) {
				t.Fatalf("id %d check %d: blocked=%v evaluations=%d", i, n, r.Blocked(), len(r.Evaluations))
			}
			if r.Evaluations[0].Info.Banned != (n == 3) {
				t.Fatalf("id %d check %d: banned=%v", i, n, r.Evaluations[0].Info.Banned)
			}
		}
		for j := range rules {
			key, _ := ikeys.Counter(prefix, "compat", rules[j].Name, rules[j].Characteristics, ikeys.Suffix(rules[j].CountDistinct != "", string(rules[j].Algorithm)), id)
			ks, err1 := c.ClusterKeySlot(ctx, key).Result()
			bs, err2 := c.ClusterKeySlot(ctx, ikeys.BanKey(key)).Result()
			if err1 != nil || err2 != nil || ks != bs || ks != int64(slot(key)) {
				t.Errorf("id %d rule %s: key %q slot %d, ban slot %d, ours %d (%v %v)", i, rules[j].Name, key, ks, bs, slot(key), err1, err2)
			}
			if !exists(t, c, key) {
				t.Errorf("id %d rule %s: counter %q missing", i, rules[j].Name, key)
			}
		}
		// by_ip counter and ban, by_ip_path and users_per_ip counters.
		if n, err := l.Clear(ctx, id); err != nil || n != 4 {
			t.Errorf("id %d: clear = %d, %v; want 4", i, n, err)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestClusterBanKeyOutsideSlot(t *testing.T) {
	s := New(redistest.ClusterClient(t))
	op := ratelimit.Op{Key: "no-tag", BanKey: "no-tag:ban", Cost: 1, Limit: 1, Period: time.Minute, BanFor: time.Minute}
	if slot(op.Key) == slot(op.BanKey) {
		t.Fatal("test keys share a slot")
	}
	if _, err := s.Eval(ctx, check, []ratelimit.Op{op}); err == nil || !strings.Contains(err.Error(), "hash tag") {
		t.Fatalf("err = %v, want a hash tag error", err)
	}
}

func TestClusterModeOption(t *testing.T) {
	c := redistest.Client(t)
	for _, tt := range []struct {
		opts []Option
		want sharding
	}{
		{nil, single},
		{[]Option{WithClusterMode(true)}, bySlot},
		{[]Option{WithClusterMode(true), WithClusterMode(false)}, single},
	} {
		if got := New(c, tt.opts...).sharding; got != tt.want {
			t.Errorf("%d options: sharding %d, want %d", len(tt.opts), got, tt.want)
		}
	}
	cc := redistest.ClusterClient(t)
	if got := New(cc).sharding; got != bySlot {
		t.Errorf("cluster client: sharding %d", got)
	}
	if got := New(cc, WithClusterMode(false)).sharding; got != single {
		t.Errorf("cluster client, forced off: sharding %d", got)
	}
	// Forced cluster mode on a standalone server still evaluates correctly:
	// slot groups pipelined to the one server.
	k := newKeyer(t)
	s := New(c, WithClusterMode(true))
	ops := spread(k, 5)
	out := eval(t, s, check, ops...)
	for i, o := range out {
		if !o.Evaluated || o.Count != 1 {
			t.Errorf("op %d: %+v", i, o)
		}
	}
	if got := New(newRing(t)).sharding; got != byTag {
		t.Errorf("ring: sharding %d", got)
	}
}

// TestClusterRedirects: a check follows MOVED (a slot that moved since the
// client loaded the slot map) and ASK (a slot being migrated) as go-redis'
// cluster client follows them for its own commands, and so does a Store from
// Dial, in the plain form and the script. Private cluster: the slots are
// moved for real.
func TestClusterRedirects(t *testing.T) {
	addrs := startCluster(t)
	nodes := make([]*redis.Client, len(addrs))
	ids := make([]string, len(addrs))
	for i, a := range addrs {
		nodes[i] = redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = nodes[i].Close() })
		id, err := nodes[i].Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	owner := func(s int) int { return s * len(addrs) / numSlots } // startCluster gives each master a third, in order
	c := newHookedCluster(t, addrs)
	s, k := New(c.ClusterClient), newKeyer(t)
	eval(t, s, check, k.count("warm", 10, 1)) // the client has the slot map from here on
	// A Store from Dial on the same cluster, its rueidis client following the
	// same redirections, for the plain form and the script.
	d := dialStore(t, "redis://"+addrs[0]+"?addr="+strings.Join(addrs[1:], "&addr="))
	eval(t, d, check, k.count("warm", 10, 1))

	t.Run("MOVED", func(t *testing.T) {
		op := k.count("moved", 10, 1)
		sl := slot(op.Key)
		from := owner(sl)
		to := (from + 1) % len(addrs)
		for _, n := range nodes { // an empty slot may simply be reassigned
			if err := n.Do(ctx, "CLUSTER", "SETSLOT", sl, "NODE", ids[to]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		c.takeAll()
		expectOutcomes(t, "moved", eval(t, s, check, op), ok(1, time.Minute))
		redirected(t, c, addrs[from], addrs[to])
		if v := nodes[to].Get(ctx, op.Key).Val(); v != "1" {
			t.Fatalf("counter on the new owner = %q, want 1", v)
		}
		expectOutcomes(t, "moved again", eval(t, s, check, op), ok(2, time.Minute))
		expectOutcomes(t, "moved, dial", eval(t, d, check, op), ok(3, time.Minute))
		expectOutcomes(t, "moved, dial script", eval(t, d, check, banned(op, time.Hour)), ok(4, time.Minute))
		if v := nodes[to].Get(ctx, op.Key).Val(); v != "4" {
			t.Fatalf("counter on the new owner = %q, want 4", v)
		}
	})
	t.Run("ASK", func(t *testing.T) {
		op := k.count("ask", 10, 1)
		sl := slot(op.Key)
		from := owner(sl)
		to := (from + 1) % len(addrs)
		if err := nodes[to].Do(ctx, "CLUSTER", "SETSLOT", sl, "IMPORTING", ids[from]).Err(); err != nil {
			t.Fatal(err)
		}
		if err := nodes[from].Do(ctx, "CLUSTER", "SETSLOT", sl, "MIGRATING", ids[to]).Err(); err != nil {
			t.Fatal(err)
		}
		// The key is not on its owner, which is migrating the slot: ASK.
		c.takeAll()
		expectOutcomes(t, "asked", eval(t, s, check, op), ok(1, time.Minute))
		redirected(t, c, addrs[from], addrs[to])
		if n := nodes[from].Exists(ctx, op.Key).Val(); n != 0 {
			t.Fatalf("the counter was written on the migrating node")
		}
		if v := c.Get(ctx, op.Key).Val(); v != "1" { // asked too
			t.Fatalf("counter on the importing node = %q, want 1", v)
		}
		expectOutcomes(t, "asked, dial", eval(t, d, check, op), ok(2, time.Minute))
		// The script, with one key: a counter and its ban key would be a
		// multi-key request, which Redis answers TRYAGAIN until the
		// migration ends.
		half := op
		half.Cost = 0.5
		expectOutcomes(t, "asked, dial script", eval(t, d, check, half), ok(2.5, time.Minute))
		if n := nodes[from].Exists(ctx, op.Key).Val(); n != 0 {
			t.Fatalf("the counter was written on the migrating node through Dial")
		}
	})
}

// redirected checks that the last check went to node from, then to node to.
func redirected(t *testing.T, c *hookedCluster, from, to string) {
	t.Helper()
	_, per := c.takeAll()
	if f := per[from]; len(f) == 0 || !strings.Contains(f[0], "evalsha") {
		t.Errorf("the old owner %s saw %v, want the EVALSHA it redirected", from, f)
	}
	if len(per[to]) == 0 {
		t.Errorf("the new owner %s saw nothing (all: %v)", to, per)
	}
	t.Logf("nodes: %v", per)
}

// TestClusterFailoverGoRedis: New on a go-redis ClusterClient, the master of
// a counter's slot killed and its replica promoted. Checks must reach the new
// master within a few calls; the client kept sending them to the dead node
// until its periodic state reload, 60 s after the last one, and the
// limiter failed open all that while.
func TestClusterFailoverGoRedis(t *testing.T) {
	redistest.URL(t)
	args := []string{"--cluster-node-timeout", "1000"} // a prompt failover
	nodes := redistest.StartCluster(t, 3, args...)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	defer c.Close()
	s, k := New(c), newKeyer(t)
	op := k.count("a", 1000, 1)
	master := redistest.MasterOf(t, c, nodes, op.Key)
	replica := redistest.AddReplica(t, nodes, master, args...)
	eval(t, s, check, op)
	master.Stop()
	replica.WaitMaster(t)
	// Counted in calls, not time: the first fails on the dead node, the ones
	// after it reach the new master.
	var errs []error
	for range 20 {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := s.Eval(cctx, check, []ratelimit.Op{op})
		cancel()
		if err == nil {
			break
		}
		errs = append(errs, err)
		time.Sleep(50 * time.Millisecond) // the reload is asynchronous
	}
	if len(errs) == 20 {
		t.Fatalf("20 checks after the failover all failed, the last: %v", errs[len(errs)-1])
	}
}
