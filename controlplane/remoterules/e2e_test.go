package remoterules_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/controlplane/remoterules"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesserver"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// e2e is the whole per-request rules path on real parts: the reference server on a
// real gRPC listener, its documents and the counters in a real Redis.
type e2e struct {
	srv    *rulesserver.Server
	calls  *counting
	grpc   *grpcServer
	rpc    rulesv1.RulesServiceClient
	store  ratelimit.Store
	prefix string
}

func newE2E(t *testing.T) *e2e {
	t.Helper()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	srv, err := rulesserver.New(rulesserver.Config{Redis: rdb, KeyPrefix: prefix + "rules:"})
	if err != nil {
		t.Fatal(err)
	}
	calls := &counting{RulesServiceServer: srv}
	g := startGRPC(t, calls)
	return &e2e{srv: srv, calls: calls, grpc: g, rpc: dial(t, g.addr), store: redisstore.New(rdb), prefix: prefix}
}

// premium345 raises namespace 345's per_namespace limit from 2 to 5 for
// service web; the name is the default rule's, so it takes over its counter.
func premium345() *rulesv1.OverrideDocument {
	return &rulesv1.OverrideDocument{
		Service: "web", Limiter: "rack_request",
		Overrides: []*rulesv1.Override{{
			Selector: map[string]string{"root_namespace": "345"},
			Rules:    &configv1.RuleList{Rules: []*configv1.Rule{limitRule("per_namespace", 5)}},
		}},
	}
}

func checkN(t *testing.T, l *ratelimit.Limiter, id ratelimit.Identifier, n int) (allowed int, last ratelimit.Result) {
	t.Helper()
	for range n {
		last = l.Check(context.Background(), id)
		if last.Err != nil {
			t.Fatalf("check failed open: %v", last.Err)
		}
		if !last.Blocked() {
			allowed++
		}
	}
	return allowed, last
}

func TestNamespaceOverrideChangesVerdict(t *testing.T) {
	e := newE2E(t)
	if _, err := e.srv.Put(context.Background(), premium345()); err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, e.store, e.prefix, newClient(t, e.rpc, "web", nil).RulesFor)

	allowed, last := checkN(t, l, ratelimit.Identifier{"root_namespace": "345", "ip": "10.0.0.1"}, 7)
	if allowed != 5 || !last.Blocked() || last.Info.Limit != 5 {
		t.Fatalf("namespace 345: %d allowed (want 5 of 7), last %+v", allowed, last)
	}
	if ev := last.Evaluations[0]; !ev.PerRequest || ev.Tier != tiers.Remote || ev.Rule.Name != "per_namespace" {
		t.Fatalf("evaluation %+v: want the remote tier's per_namespace", ev)
	}
	allowed, last = checkN(t, l, ratelimit.Identifier{"root_namespace": "7", "ip": "10.0.0.1"}, 4)
	if allowed != 2 || last.Evaluations[0].PerRequest {
		t.Fatalf("namespace 7: %d allowed (want the default 2 of 4), evaluations %+v", allowed, last.Evaluations)
	}
}

func TestScopingByService(t *testing.T) {
	e := newE2E(t)
	if _, err := e.srv.Put(context.Background(), premium345()); err != nil {
		t.Fatal(err)
	}
	// Service api checks the same limiter name: web's override never reaches it.
	l := newLimiter(t, e.store, e.prefix, newClient(t, e.rpc, "api", nil).RulesFor)
	allowed, last := checkN(t, l, ratelimit.Identifier{"root_namespace": "345"}, 4)
	if allowed != 2 || last.Evaluations[0].PerRequest {
		t.Fatalf("service api: %d allowed (want the default 2 of 4), evaluations %+v", allowed, last.Evaluations)
	}
	if e.calls.calls.Load() == 0 {
		t.Fatal("the client never asked the service")
	}
}

func TestOverrideByNameInheritsCounter(t *testing.T) {
	e := newE2E(t)
	id := ratelimit.Identifier{"root_namespace": "345"}
	// Before the override: the default rule (limit 2) counts 2.
	local := newLimiter(t, e.store, e.prefix, newClient(t, e.rpc, "web", nil).RulesFor)
	if allowed, _ := checkN(t, local, id, 2); allowed != 2 {
		t.Fatalf("default tier: %d allowed, want 2", allowed)
	}
	if _, err := e.srv.Put(context.Background(), premium345()); err != nil {
		t.Fatal(err)
	}
	// A fresh client (no cached empty answer) sees the override: the count
	// goes on from 2, so 3 more are allowed, not 5.
	remote := newLimiter(t, e.store, e.prefix, newClient(t, e.rpc, "web", nil).RulesFor)
	r := remote.Check(context.Background(), id)
	if r.Blocked() || r.Info.Count != 3 || r.Info.Limit != 5 || !r.Evaluations[0].PerRequest {
		t.Fatalf("first check under the override: %+v %+v (want count 3 of 5, inherited)", r, r.Info)
	}
	if allowed, _ := checkN(t, remote, id, 3); allowed != 2 {
		t.Fatalf("%d more allowed, want 2 (the inherited counter reaches 5)", allowed)
	}
}

func TestCacheServesRepeatedShapesWithoutCalls(t *testing.T) {
	e := newE2E(t)
	if _, err := e.srv.Put(context.Background(), premium345()); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, e.rpc, "web", nil)
	ctx := context.Background()
	// The answer varies by root_namespace only: other properties share it.
	for i := range 50 {
		id := ratelimit.Identifier{"root_namespace": "345", "ip": "10.0.0." + string(rune('0'+i%10)), "plan": "any"}
		if set := c.RulesFor(ctx, "rack_request", id); set.Len() != 1 {
			t.Fatalf("check %d: %d rules, want the override", i, set.Len())
		}
	}
	if n := e.calls.calls.Load(); n != 1 {
		t.Fatalf("50 checks of one namespace made %d calls, want 1", n)
	}
	// Another namespace is another shape: one more call, then cached (empty
	// answers are cached too).
	for range 20 {
		if set := c.RulesFor(ctx, "rack_request", ratelimit.Identifier{"root_namespace": "9"}); set != nil {
			t.Fatalf("namespace 9: %v, want no remote rules", set.Rules())
		}
	}
	if n := e.calls.calls.Load(); n != 2 {
		t.Fatalf("calls %d, want 2", n)
	}
	if st := c.Stats(); st.Hits != 68 || st.Misses != 2 || st.Entries != 2 {
		t.Fatalf("stats %+v: want 68 hits, 2 misses, 2 entries", st)
	}
}

func TestRevalidationNotModified(t *testing.T) {
	e := newE2E(t)
	doc := premium345()
	doc.CacheForS, doc.StaleForS = 10, 60
	if _, err := e.srv.Put(context.Background(), doc); err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	rec := &recorder{}
	c := newClient(t, e.rpc, "web", func(cfg *remoterules.Config) { cfg.Now, cfg.Metrics = clk.Now, rec })
	ctx := context.Background()
	id := ratelimit.Identifier{"root_namespace": "345"}
	if c.RulesFor(ctx, "rack_request", id).Len() != 1 {
		t.Fatal("want the override")
	}
	clk.Advance(11e9) // stale: served while one call revalidates it
	if c.RulesFor(ctx, "rack_request", id).Len() != 1 {
		t.Fatal("stale: want the override still")
	}
	eventually(t, "the revalidation call to finish", func() bool { return len(rec.outcomes()) == 2 })
	if got := rec.outcomes(); got[0] != remoterules.CallOK || got[1] != remoterules.CallNotModified {
		t.Fatalf("call outcomes %v, want ok then not_modified", got)
	}
	// Fresh again with the same rules: a hit, no call.
	if c.RulesFor(ctx, "rack_request", id).Len() != 1 {
		t.Fatal("after revalidation: want the override")
	}
	if st := c.Stats(); st.Failures != 0 || st.Stale != 1 || st.Hits != 1 || st.Calls != 2 || e.calls.calls.Load() != 2 {
		t.Fatalf("stats %+v: want 1 stale serve, then a hit, 2 calls, no failure", st)
	}
}

// An override that changes the algorithm of a default rule (by name) counts
// by the new algorithm, on a fresh counter: the default's 2 hits are not
// inherited, and the token bucket's burst is what the first checks get.
func TestOverrideWithAlgorithm(t *testing.T) {
	e := newE2E(t)
	id := ratelimit.Identifier{"root_namespace": "345"}
	local := newLimiter(t, e.store, e.prefix, newClient(t, e.rpc, "web", nil).RulesFor)
	if allowed, _ := checkN(t, local, id, 2); allowed != 2 {
		t.Fatalf("default tier: %d allowed, want 2", allowed)
	}
	bucket := limitRule("per_namespace", 1) // one per hour
	bucket.Algorithm, bucket.Burst = configv1.Algorithm_ALGORITHM_TOKEN_BUCKET, u32(4)
	doc := premium345()
	doc.Overrides[0].Rules.Rules = []*configv1.Rule{bucket}
	if _, err := e.srv.Put(context.Background(), doc); err != nil {
		t.Fatal(err)
	}
	remote := newLimiter(t, e.store, e.prefix, newClient(t, e.rpc, "web", nil).RulesFor)
	allowed, last := checkN(t, remote, id, 6)
	if allowed != 4 || !last.Blocked() || last.Evaluations[0].Rule.Algorithm != ratelimit.TokenBucket {
		t.Fatalf("token bucket override: %d allowed of 6 (want the burst, 4, on a fresh counter), last %+v", allowed, last)
	}
	// GCRA: the next token comes an hour / 1 after the bucket filled; the
	// blocked check is told when that is, not the end of a window.
	if ra := time.Until(last.Info.ResetAt); ra > time.Hour || ra < 59*time.Minute {
		t.Fatalf("retry in %v, want about an hour", ra)
	}
}
