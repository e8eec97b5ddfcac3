package ratelimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
)

// modeStores are the stores shadow mode is proven on: the in-process one and
// the real Redis (standalone and cluster), each skipped only when its env var
// is unset.
func modeStores() []struct {
	name  string
	store func(t *testing.T) ratelimit.Store
} {
	return []struct {
		name  string
		store func(t *testing.T) ratelimit.Store
	}{
		{"memory", func(*testing.T) ratelimit.Store { return ratelimit.NewMemoryStore() }},
		{"redis", func(t *testing.T) ratelimit.Store { return redisstore.New(redistest.Client(t)) }},
		{"redis_cluster", func(t *testing.T) ratelimit.Store { return redisstore.New(redistest.ClusterClient(t)) }},
	}
}

func modeRules() []ratelimit.Rule {
	return []ratelimit.Rule{
		{Name: "per_user", Characteristics: []string{"user"}, Limit: 3, Period: time.Minute, BanFor: time.Hour, Action: ratelimit.ActionLimit},
		{Name: "after", Characteristics: []string{"user"}, Limit: 100, Period: time.Minute, Action: ratelimit.ActionLimit},
	}
}

func evalOf(r ratelimit.Result, rule string) *ratelimit.Evaluation {
	for i := range r.Evaluations {
		if r.Evaluations[i].Rule.Name == rule {
			return &r.Evaluations[i]
		}
	}
	return nil
}

// TestShadowCountsLikeEnforce runs the same checks through a shadow limiter
// and an enforcing one with the same rules on the same store: every
// evaluation (counts, bans, which rules were reached) is equal, the shadow
// one never blocks and says when it would have. Then the shadow limiter is
// switched to Enforce at runtime and blocks at once, on the ban its shadow
// checks wrote.
func TestShadowCountsLikeEnforce(t *testing.T) {
	for _, st := range modeStores() {
		t.Run(st.name, func(t *testing.T) {
			store := st.store(t)
			prefix := "ratekit-test-mode-" + st.name + "-" + time.Now().Format("150405.000000000") + ":"
			mk := func(name string, e ratelimit.Enforcement) *ratelimit.Limiter {
				// Every check must succeed: no default 100ms timeout, which a
				// loaded machine descheduling a check that long would hit.
				l, err := ratelimit.New(ratelimit.Config{Name: name, Store: store, KeyPrefix: prefix, Rules: modeRules(), Enforcement: e,
					Timeout: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			shadow, enforce := mk("mode_shadow", ratelimit.Shadow), mk("mode_enforce", ratelimit.Enforce)
			if shadow.Enforcement() != ratelimit.Shadow || enforce.Enforcement() != ratelimit.Enforce {
				t.Fatalf("modes = %v, %v", shadow.Enforcement(), enforce.Enforcement())
			}
			ctx := context.Background()
			id := ratelimit.Identifier{"user": "u1"}
			for i := 1; i <= 6; i++ {
				s, e := shadow.Check(ctx, id), enforce.Check(ctx, id)
				if s.Err != nil || e.Err != nil {
					t.Fatalf("check %d: errors %v, %v", i, s.Err, e.Err)
				}
				if s.Action != ratelimit.ActionAllow || !s.Shadow {
					t.Fatalf("check %d: shadow result action=%s shadow=%v, want allow and shadow", i, s.Action, s.Shadow)
				}
				if e.Shadow {
					t.Fatalf("check %d: enforcing result says shadow", i)
				}
				wantBlock := i > 3
				if e.Blocked() != wantBlock || s.WouldBlock() != wantBlock || e.WouldBlock() != wantBlock {
					t.Fatalf("check %d: enforce blocked=%v, shadow would block=%v, want %v", i, e.Blocked(), s.WouldBlock(), wantBlock)
				}
				if s.Enforcing() != nil {
					t.Fatalf("check %d: shadow result has an enforcing evaluation (headers would leak)", i)
				}
				if len(s.Evaluations) != len(e.Evaluations) {
					t.Fatalf("check %d: shadow evaluated %d rules, enforce %d", i, len(s.Evaluations), len(e.Evaluations))
				}
				for j := range s.Evaluations {
					se, ee := s.Evaluations[j], e.Evaluations[j]
					if se.Rule.Name != ee.Rule.Name || se.Info.Count != ee.Info.Count || se.Info.Banned != ee.Info.Banned ||
						se.Blocked != ee.Blocked || se.Exceeded != ee.Exceeded {
						t.Fatalf("check %d rule %s: shadow %+v, enforce %+v", i, se.Rule.Name, se, ee)
					}
				}
				if (s.Rule == nil) != (e.Rule == nil) || (s.Rule != nil && s.Rule.Name != e.Rule.Name) {
					t.Fatalf("check %d: most constraining rule differs: %v vs %v", i, s.Rule, e.Rule)
				}
			}
			// The terminal block stopped counting of the later rule in both.
			if ev := evalOf(shadow.Peek(ctx, id), "per_user"); ev == nil || !ev.Info.Banned {
				t.Fatalf("shadow checks wrote no ban: %+v", ev)
			}
			if err := shadow.SetEnforcement(ratelimit.Enforce); err != nil {
				t.Fatal(err)
			}
			if r := shadow.Check(ctx, id); !r.Blocked() || r.Shadow || !r.Info.Banned {
				t.Fatalf("after switching to enforce: %+v, want blocked by the shadow-written ban", r)
			}
			if r := shadow.Check(ctx, ratelimit.Identifier{"user": "u2"}); r.Blocked() || r.Err != nil {
				t.Fatalf("another user after the switch: %+v", r)
			}
			if err := shadow.SetEnforcement(ratelimit.Shadow); err != nil {
				t.Fatal(err)
			}
			if r := shadow.Check(ctx, id); r.Blocked() || !r.WouldBlock() {
				t.Fatalf("back in shadow: blocked=%v wouldBlock=%v", r.Blocked(), r.WouldBlock())
			}
		})
	}
}

func TestEnforcementValues(t *testing.T) {
	if _, err := ratelimit.New(ratelimit.Config{Name: "x", Store: ratelimit.NewMemoryStore(), Enforcement: 7}); err == nil {
		t.Error("New accepted an invalid mode")
	}
	l, err := ratelimit.New(ratelimit.Config{Name: "x", Store: ratelimit.NewMemoryStore()})
	if err != nil {
		t.Fatal(err)
	}
	if l.Enforcement() != ratelimit.Enforce {
		t.Errorf("default mode = %v, want enforce", l.Enforcement())
	}
	if err := l.SetEnforcement(-1); err == nil || l.Enforcement() != ratelimit.Enforce {
		t.Errorf("SetEnforcement(-1) = %v, mode now %v", err, l.Enforcement())
	}
}

// TestShadowObserverAndFailOpen: observers see the shadowed verdict, and a
// skip or fail-open result in shadow mode never would have blocked.
func TestShadowObserverAndFailOpen(t *testing.T) {
	var mu sync.Mutex
	var seen []ratelimit.Result
	obs := func(_ context.Context, e ratelimit.Event) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, *e.Result)
	}
	rules := []ratelimit.Rule{
		{Name: "skip_admins", Match: map[string]ratelimit.Matcher{"role": ratelimit.Equal("admin")}, Action: ratelimit.ActionSkip},
		{Name: "tight", Characteristics: []string{"user"}, Limit: 1, Period: time.Minute, Action: ratelimit.ActionLimit},
	}
	l, err := ratelimit.New(ratelimit.Config{Name: "obs", Store: ratelimit.NewMemoryStore(), Rules: rules, Enforcement: ratelimit.Shadow, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l.Check(ctx, ratelimit.Identifier{"user": "a"})
	r := l.Check(ctx, ratelimit.Identifier{"user": "a"})
	if r.Blocked() || !r.WouldBlock() {
		t.Fatalf("second check: blocked=%v wouldBlock=%v", r.Blocked(), r.WouldBlock())
	}
	if r := l.Check(ctx, ratelimit.Identifier{"user": "a", "role": "admin"}); !r.Skipped || r.WouldBlock() {
		t.Fatalf("skip in shadow: %+v", r)
	}
	if r := l.Check(ctx, ratelimit.Identifier{"user": "a"}, ratelimit.Cost(-1)); r.Err == nil || r.WouldBlock() || !r.Shadow {
		t.Fatalf("fail-open in shadow: %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 4 || seen[1].Action != ratelimit.ActionAllow || !seen[1].Shadow || !seen[1].WouldBlock() {
		t.Fatalf("observer saw %+v", seen)
	}
}

// TestSetEnforcementConcurrent flips the mode while checks run (under -race):
// every result is either an enforcing one or a shadow one, never a mix.
func TestSetEnforcementConcurrent(t *testing.T) {
	l, err := ratelimit.New(ratelimit.Config{Name: "flip", Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{basic("per_user")}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = l.SetEnforcement(ratelimit.Enforcement(i % 2))
		}
	}()
	shadowBlocks := 0
	for i := 0; i < 2000; i++ {
		r := l.Check(context.Background(), ratelimit.Identifier{"user": "u"})
		if r.Shadow && r.Blocked() {
			shadowBlocks++
		}
		if !r.WouldBlock() && i >= 5 {
			t.Fatalf("check %d over the limit: would block = false (%+v)", i, r)
		}
	}
	close(stop)
	wg.Wait()
	if shadowBlocks != 0 {
		t.Fatalf("%d shadow results blocked", shadowBlocks)
	}
}
