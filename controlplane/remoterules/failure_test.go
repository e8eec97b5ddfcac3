package remoterules_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/controlplane/remoterules"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// answer is a valid answer raising per_namespace to limit, varying by namespace.
func answer(limit uint32) *rulesv1.GetRulesResponse {
	return &rulesv1.GetRulesResponse{
		Rules:     &configv1.RuleList{Rules: []*configv1.Rule{limitRule("per_namespace", limit)}},
		CacheForS: 10, StaleForS: 60, Revision: "1", Vary: []string{"root_namespace"},
	}
}

func TestSingleflightColdKey(t *testing.T) {
	release := make(chan struct{})
	srv := &counting{RulesServiceServer: funcServer{f: func(ctx context.Context, _ *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return answer(5), nil
	}}}
	g := startGRPC(t, srv)
	c := newClient(t, dial(t, g.addr), "web", func(cfg *remoterules.Config) { cfg.Timeout = 30 * time.Second })

	const n = 64
	var wg sync.WaitGroup
	got := make([]int, n)
	for i := range n {
		wg.Go(func() {
			got[i] = c.RulesFor(context.Background(), "rack_request", ratelimit.Identifier{"root_namespace": "345", "ip": "10.0.0.1"}).Len()
		})
	}
	eventually(t, "64 checks waiting", func() bool { return c.Stats().Misses == n })
	close(release)
	wg.Wait()
	if calls := srv.calls.Load(); calls != 1 {
		t.Fatalf("%d cold checks made %d calls, want 1", n, calls)
	}
	for i, g := range got {
		if g != 1 {
			t.Fatalf("check %d got %d rules, want the answer's 1", i, g)
		}
	}
}

func TestStaleServesWhileServerDown(t *testing.T) {
	srv := &counting{RulesServiceServer: funcServer{f: func(context.Context, *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
		return answer(5), nil
	}}}
	g := startGRPC(t, srv)
	clk := newClock()
	// newClient's timeout (5s), not a short one: the first check must get the
	// answer, a cold call over a new connection, which a loaded machine
	// stalling for a short timeout would fail; once the server is down, calls
	// fail at once (connection refused).
	c := newClient(t, dial(t, g.addr), "web", func(cfg *remoterules.Config) { cfg.Now = clk.Now })
	ctx := context.Background()
	id := ratelimit.Identifier{"root_namespace": "345"}
	if c.RulesFor(ctx, "rack_request", id).Len() != 1 {
		t.Fatal("want the answer")
	}
	g.stop()
	clk.Advance(30 * time.Second) // past cache_for (10s), within stale_for (60s)
	for i := range 5 {
		if c.RulesFor(ctx, "rack_request", id).Len() != 1 {
			t.Fatalf("stale check %d: want the stale answer while the server is down", i)
		}
	}
	eventually(t, "the failed revalidation", func() bool { return c.Stats().Failures >= 1 })
	if c.RulesFor(ctx, "rack_request", id).Len() != 1 {
		t.Fatal("after a failed revalidation the stale answer still serves")
	}
	clk.Advance(time.Minute) // past stale_for: the local tiers serve
	if set := c.RulesFor(ctx, "rack_request", id); set != nil {
		t.Fatalf("past the stale lifetime: %v, want nil (local tiers)", set.Rules())
	}
	if st := c.Stats(); st.Stale < 6 {
		t.Fatalf("stats %+v: want at least 6 stale serves", st)
	}
}

func TestHangingServerCostsAtMostTheDeadlineThenNothing(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	srv := &counting{RulesServiceServer: funcServer{f: func(ctx context.Context, _ *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
		select { // never answers; gives up only when the client does
		case <-hang:
		case <-ctx.Done():
		}
		return nil, status.Error(codes.DeadlineExceeded, "too late")
	}}}
	g := startGRPC(t, srv)
	c := newClient(t, dial(t, g.addr), "web", func(cfg *remoterules.Config) {
		cfg.Timeout = 50 * time.Millisecond
		cfg.Breaker = remoterules.BreakerConfig{Failures: 3, Cooldown: time.Hour}
	})
	store := ratelimit.NewMemoryStore()
	l := newLimiter(t, store, "", c.RulesFor)
	ctx := context.Background()
	// Each check returns (the deadline bounds its wait) with the local verdict.
	for i := 0; !c.Stats().Open; i++ {
		if i > 1000 {
			t.Fatal("the breaker never opened")
		}
		r := l.Check(ctx, ratelimit.Identifier{"root_namespace": "ns" + string(rune('a'+i%26)), "ip": "x"})
		if r.Err != nil || len(r.Evaluations) == 0 || r.Evaluations[0].PerRequest {
			t.Fatalf("check %d: %+v, want the local default's verdict", i, r)
		}
	}
	calls := srv.calls.Load()
	// The breaker may open between two checks of the loop above (a call ends
	// on its own deadline, after its check stopped waiting), so the last of
	// them may already have been skipped: skips count from here.
	before := c.Stats()
	// Open: checks cost no call at all.
	for i := range 100 {
		r := l.Check(ctx, ratelimit.Identifier{"root_namespace": "other", "ip": string(rune('a' + i%26))})
		if r.Err != nil || r.Evaluations[0].PerRequest {
			t.Fatalf("check %d with the breaker open: %+v", i, r)
		}
	}
	if got := srv.calls.Load(); got != calls {
		t.Fatalf("with the breaker open the server got %d more calls, want 0", got-calls)
	}
	if st := c.Stats(); st.Skipped-before.Skipped != 100 || st.Failures < 3 {
		t.Fatalf("stats %+v: want 100 more skipped (%d before), at least 3 failures", st, before.Skipped)
	}
}

func TestInvalidAnswerNeverApplies(t *testing.T) {
	skip := &configv1.Rule{Name: "skip_everything", Action: configv1.Action_ACTION_SKIP}
	tests := []struct {
		name string
		resp *rulesv1.GetRulesResponse
	}{
		{"schema: limit 0", &rulesv1.GetRulesResponse{Rules: &configv1.RuleList{Rules: []*configv1.Rule{limitRule("per_namespace", 0)}}}},
		{"unknown property", &rulesv1.GetRulesResponse{Rules: &configv1.RuleList{Rules: []*configv1.Rule{{Name: "by_user", Action: configv1.Action_ACTION_LIMIT, Characteristics: []string{"user"}, Limit: u32(1), PeriodS: u32(1)}}}}},
		{"skip not allowed", &rulesv1.GetRulesResponse{Rules: &configv1.RuleList{Rules: []*configv1.Rule{skip}}}},
		{"one bad rule rejects the valid one", &rulesv1.GetRulesResponse{Rules: &configv1.RuleList{Rules: []*configv1.Rule{limitRule("per_namespace", 50), {Name: "BAD", Action: configv1.Action_ACTION_SKIP}}}}},
		{"duplicate names", &rulesv1.GetRulesResponse{Rules: &configv1.RuleList{Rules: []*configv1.Rule{limitRule("a", 5), limitRule("a", 6)}}}},
		{"not_modified with rules", &rulesv1.GetRulesResponse{NotModified: true, Rules: &configv1.RuleList{Rules: []*configv1.Rule{limitRule("a", 5)}}}},
		{"not_modified of nothing held", &rulesv1.GetRulesResponse{NotModified: true}},
		{"bad vary", &rulesv1.GetRulesResponse{Vary: []string{"Root-Namespace"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &counting{RulesServiceServer: funcServer{f: func(context.Context, *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
				return tt.resp, nil
			}}}
			c := newClient(t, dial(t, startGRPC(t, srv).addr), "web", nil)
			l := newLimiter(t, ratelimit.NewMemoryStore(), "", c.RulesFor)
			allowed := 0
			for range 4 {
				r := l.Check(context.Background(), ratelimit.Identifier{"root_namespace": "345"})
				if r.Matched && len(r.Evaluations) > 0 && r.Evaluations[0].PerRequest {
					t.Fatalf("a rule of the invalid answer applied: %+v", r.Evaluations[0])
				}
				if !r.Blocked() {
					allowed++
				}
			}
			if allowed != 2 {
				t.Fatalf("%d of 4 allowed, want the local default's 2", allowed)
			}
			if st := c.Stats(); st.Invalid == 0 || st.Entries != 0 {
				t.Fatalf("stats %+v: want the answer counted invalid and nothing cached", st)
			}
		})
	}
}

func TestLocalTiersServeWhenServiceGone(t *testing.T) {
	// Nothing listens there: every call fails fast, then the breaker opens.
	c := newClient(t, dial(t, redistest.UnusedAddr(t)), "web", func(cfg *remoterules.Config) { cfg.Timeout = 50 * time.Millisecond })
	l := newLimiter(t, ratelimit.NewMemoryStore(), "", c.RulesFor)
	allowed := 0
	for range 10 {
		r := l.Check(context.Background(), ratelimit.Identifier{"root_namespace": "345"})
		if r.Err != nil {
			t.Fatalf("check failed: %v (the rules service is not the store: its loss is no error)", r.Err)
		}
		if !r.Blocked() {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("%d of 10 allowed, want the local default's 2", allowed)
	}
	eventually(t, "the breaker to open", func() bool {
		l.Check(context.Background(), ratelimit.Identifier{"root_namespace": "345"})
		return c.Stats().Open
	})
	if st := c.Stats(); st.Calls != 3 {
		t.Fatalf("stats %+v: want 3 calls (one at a time, each failure counted), then none", st)
	}
}

func TestCacheIsBounded(t *testing.T) {
	srv := &counting{RulesServiceServer: funcServer{f: func(context.Context, *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
		return answer(5), nil
	}}}
	c := newClient(t, dial(t, startGRPC(t, srv).addr), "web", func(cfg *remoterules.Config) { cfg.MaxEntries = 3 })
	ctx := context.Background()
	long := string(make([]byte, 3000)) // a long value is keyed by its hash
	for _, ns := range []string{"a", "b", "c", "d", long, "e"} {
		if c.RulesFor(ctx, "rack_request", ratelimit.Identifier{"root_namespace": ns}).Len() != 1 {
			t.Fatalf("namespace %.8q: want the answer", ns)
		}
	}
	if st := c.Stats(); st.Entries != 3 || st.Calls != 6 {
		t.Fatalf("stats %+v: want 3 entries (the bound) after 6 calls", st)
	}
	// "e" is recent, "a" was evicted.
	c.RulesFor(ctx, "rack_request", ratelimit.Identifier{"root_namespace": "e"})
	c.RulesFor(ctx, "rack_request", ratelimit.Identifier{"root_namespace": "a"})
	if calls := srv.calls.Load(); calls != 7 {
		t.Fatalf("calls %d, want 7 (a hit for e, a miss for the evicted a)", calls)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	rpc := dial(t, redistest.UnusedAddr(t))
	for _, cfg := range []remoterules.Config{
		{Service: "web"},
		{Service: "", RulesService: rpc},
		{Service: "Web Service", RulesService: rpc},
	} {
		if _, err := remoterules.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestBlackholeServerThenBreaker(t *testing.T) {
	// A listener that accepts and never speaks: not even the HTTP/2 handshake
	// completes, so every call can only end by its deadline.
	c := newClient(t, dial(t, redistest.Blackhole(t)), "web", func(cfg *remoterules.Config) {
		cfg.Timeout = 50 * time.Millisecond
		cfg.Breaker = remoterules.BreakerConfig{Failures: 2, Cooldown: time.Hour}
	})
	l := newLimiter(t, ratelimit.NewMemoryStore(), "", c.RulesFor)
	ctx := context.Background()
	for i := 0; !c.Stats().Open; i++ {
		if i > 1000 {
			t.Fatal("the breaker never opened")
		}
		if r := l.Check(ctx, ratelimit.Identifier{"root_namespace": "ns", "ip": string(rune('a' + i%26))}); r.Err != nil {
			t.Fatalf("check %d: %v", i, r.Err)
		}
	}
	// Calls end on their own deadline, after the check that waited for them
	// gave up: the breaker may open between two checks of the loop above, so
	// the last of them may already have been skipped. Count from here.
	before := c.Stats()
	for i := range 50 {
		if r := l.Check(ctx, ratelimit.Identifier{"root_namespace": "ns2", "ip": string(rune('a' + i%26))}); r.Err != nil || r.Evaluations[0].PerRequest {
			t.Fatalf("check %d with the breaker open: %+v", i, r)
		}
	}
	if st := c.Stats(); st.Calls != before.Calls || st.Skipped-before.Skipped != 50 {
		t.Fatalf("stats %+v: want no call (%d before) and 50 more skipped (%d before) once the breaker is open", st, before.Calls, before.Skipped)
	}
}

func TestBreakerProbesAfterCooldown(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	srv := &counting{RulesServiceServer: funcServer{f: func(context.Context, *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
		if down.Load() {
			return nil, status.Error(codes.Unavailable, "down")
		}
		return answer(5), nil
	}}}
	clk := newClock()
	c := newClient(t, dial(t, startGRPC(t, srv).addr), "web", func(cfg *remoterules.Config) {
		cfg.Now = clk.Now
		cfg.Breaker = remoterules.BreakerConfig{Failures: 2, Cooldown: time.Minute}
	})
	ctx := context.Background()
	id := ratelimit.Identifier{"root_namespace": "345"}
	for range 2 {
		if c.RulesFor(ctx, "rack_request", id) != nil {
			t.Fatal("a failed call gave rules")
		}
	}
	if st := c.Stats(); !st.Open || st.Calls != 2 {
		t.Fatalf("stats %+v: want the breaker open after 2 failures", st)
	}
	c.RulesFor(ctx, "rack_request", id)
	if n := srv.calls.Load(); n != 2 {
		t.Fatalf("open breaker: %d calls, want 2", n)
	}
	down.Store(false)
	clk.Advance(time.Minute)
	if c.RulesFor(ctx, "rack_request", id).Len() != 1 {
		t.Fatal("the probe after the cooldown: want the answer")
	}
	if st := c.Stats(); st.Open || st.Calls != 3 {
		t.Fatalf("stats %+v: want one probe that closed the breaker", st)
	}
}

// TestConcurrentShapesAndVaryChange runs checks of many shapes from many
// goroutines while the server's vary list changes, under the race detector:
// every answer served is a valid one, and the cache stays within its bound.
func TestConcurrentShapesAndVaryChange(t *testing.T) {
	var byPlan atomic.Bool
	srv := &counting{RulesServiceServer: funcServer{f: func(_ context.Context, req *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
		a := answer(5)
		a.CacheForS = 1
		if byPlan.Load() {
			a.Vary = []string{"plan", "root_namespace"}
		}
		return a, nil
	}}}
	clk := newClock()
	c := newClient(t, dial(t, startGRPC(t, srv).addr), "web", func(cfg *remoterules.Config) {
		cfg.Now, cfg.MaxEntries = clk.Now, 8 // 6 shapes fit; 12, once the answers vary by plan too, do not
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				id := ratelimit.Identifier{"root_namespace": i % 6, "plan": []string{"free", "premium"}[(g+i)%2]}
				if set := c.RulesFor(context.Background(), "rack_request", id); set != nil && set.Len() != 1 {
					t.Errorf("answer with %d rules", set.Len())
					return
				}
				if i == 150 && g == 0 {
					byPlan.Store(true)
				}
				if i%50 == 0 {
					clk.Advance(2 * time.Second) // answers go stale: revalidations run concurrently
				}
			}
		})
	}
	wg.Wait()
	if st := c.Stats(); st.Entries > 8 || st.Failures != 0 || st.Hits == 0 {
		t.Fatalf("stats %+v: want at most 8 entries, no failure, some hits", st)
	}
}

// The answer cached for a vary value was computed with that value: an
// identifier of more properties than a request carries (64) still sends
// the answer's vary properties, so a large identifier never caches, for
// every identifier of its plan, the answer of an identifier without one.
func TestVaryPropertiesAlwaysSent(t *testing.T) {
	srv := &counting{RulesServiceServer: funcServer{f: func(_ context.Context, req *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
		a := answer(5)
		a.Vary = []string{"plan"}
		if req.GetIdentifier()["plan"] != "premium" {
			a.Rules = &configv1.RuleList{}
		}
		return a, nil
	}}}
	large := func(plan string) ratelimit.Identifier {
		id := ratelimit.Identifier{"plan": plan}
		for i := range 70 { // sorted before plan
			id[fmt.Sprintf("a%02d", i)] = i
		}
		return id
	}
	tests := []struct {
		name string
		ids  []ratelimit.Identifier
	}{
		{"a large identifier first (no shape known yet)", []ratelimit.Identifier{large("premium"), {"plan": "premium"}}},
		{"a small identifier first (the shape known)", []ratelimit.Identifier{{"plan": "free"}, large("premium"), {"plan": "premium"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, dial(t, startGRPC(t, srv).addr), "web", nil)
			for i, id := range tt.ids {
				set := c.RulesFor(context.Background(), "rack_request", id)
				want := 0
				if p, _ := id.Get("plan"); p == "premium" {
					want = 1
				}
				if got := set.Len(); got != want {
					t.Errorf("check %d (%d properties, plan %v): %d rules, want %d (stats %+v)", i, len(id), id["plan"], got, want, c.Stats())
				}
			}
			// Two shapes, two calls: a second call only asks again for an
			// answer computed without plan, and the last check is a hit.
			if st := c.Stats(); st.Calls != 2 || st.Hits != 1 {
				t.Errorf("stats %+v: want 2 calls and 1 hit", st)
			}
		})
	}
}

// An answer evicted from the cache while a call revalidates it (the cache
// is full of other shapes) gets a not_modified answer it can no longer use:
// that is no fault of the service, so it is not counted a failure, which
// would open the breaker for every caller under cache churn. The client asks
// again for the rules whole and caches them.
func TestNotModifiedAfterEviction(t *testing.T) {
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := funcServer{f: func(ctx context.Context, req *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
		if req.GetKnownRevision() == "" {
			return answer(5), nil
		}
		asked <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &rulesv1.GetRulesResponse{NotModified: true, Revision: "1", Vary: []string{"root_namespace"}}, nil
	}}
	clk := newClock()
	rec := &recorder{}
	c := newClient(t, dial(t, startGRPC(t, srv).addr), "web", func(cfg *remoterules.Config) {
		cfg.Now, cfg.Metrics, cfg.MaxEntries = clk.Now, rec, 1
	})
	ctx := context.Background()
	a, b := ratelimit.Identifier{"root_namespace": "1"}, ratelimit.Identifier{"root_namespace": "2"}
	if c.RulesFor(ctx, "rack_request", a).Len() != 1 {
		t.Fatal("want the answer of a")
	}
	clk.Advance(11 * time.Second) // past cache_for (10s): a's next check revalidates it
	if c.RulesFor(ctx, "rack_request", a).Len() != 1 {
		t.Fatal("want a's stale answer")
	}
	<-asked
	if c.RulesFor(ctx, "rack_request", b).Len() != 1 { // evicts a (MaxEntries 1)
		t.Fatal("want the answer of b")
	}
	close(release)
	eventually(t, "the revalidation to finish", func() bool { return len(rec.outcomes()) == 3 })
	if st := c.Stats(); st.Failures != 0 || st.Invalid != 0 {
		t.Fatalf("stats %+v, outcomes %v: want no failure", st, rec.outcomes())
	}
	if c.RulesFor(ctx, "rack_request", a).Len() != 1 {
		t.Fatal("want a's answer cached again")
	}
	if st := c.Stats(); st.Hits != 1 {
		t.Fatalf("stats %+v: a's last check is not a hit", st)
	}
}
