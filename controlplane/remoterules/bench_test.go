package remoterules_test

import (
	"context"
	"testing"

	"github.com/ratekit/ratekit/controlplane/remoterules"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
)

// warmClient returns a client whose cache holds the answer for namespace 345.
func warmClient(tb testing.TB) (*counting, *remoterules.Client) {
	srv := &counting{RulesServiceServer: funcServer{f: func(context.Context, *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
		r := answer(1 << 30)
		r.CacheForS = 3600
		return r, nil
	}}}
	c := newClient(tb, dial(tb, startGRPC(tb, srv).addr), "web", nil)
	if c.RulesFor(context.Background(), "rack_request", ratelimit.Identifier{"root_namespace": "345"}).Len() != 1 {
		tb.Fatal("cold call: want the answer")
	}
	return srv, c
}

// TestWarmLookupAllocatesNothing: a cached answer costs no call and no
// allocation (string identifier values).
func TestWarmLookupAllocatesNothing(t *testing.T) {
	srv, c := warmClient(t)
	id := ratelimit.Identifier{"root_namespace": "345", "ip": "10.0.0.1"}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if c.RulesFor(ctx, "rack_request", id) == nil {
			t.Fatal("warm lookup missed")
		}
	})
	if allocs != 0 {
		t.Fatalf("warm lookup: %v allocations, want 0", allocs)
	}
	if n := srv.calls.Load(); n != 1 {
		t.Fatalf("%d calls, want only the cold one", n)
	}
}

// BenchmarkCheck compares a Check with no rule source and with the remote
// tier on a warm cache, on the in-memory store and on the real Redis.
func BenchmarkCheck(b *testing.B) {
	id := ratelimit.Identifier{"root_namespace": "345", "ip": "10.0.0.1"}
	ctx := context.Background()
	stores := []struct {
		name  string
		store func(b *testing.B) (ratelimit.Store, string)
	}{
		{"memory", func(*testing.B) (ratelimit.Store, string) { return ratelimit.NewMemoryStore(), "" }},
		{"redis", func(b *testing.B) (ratelimit.Store, string) {
			return redisstore.New(redistest.Client(b)), redistest.Prefix(b)
		}},
	}
	for _, st := range stores {
		b.Run(st.name+"/local", func(b *testing.B) {
			store, prefix := st.store(b)
			l := newLimiter(b, store, prefix, nil)
			b.ReportAllocs()
			for b.Loop() {
				l.Check(ctx, id)
			}
		})
		b.Run(st.name+"/remote-warm", func(b *testing.B) {
			store, prefix := st.store(b)
			srv, c := warmClient(b)
			l := newLimiter(b, store, prefix, c.RulesFor)
			b.ReportAllocs()
			for b.Loop() {
				l.Check(ctx, id)
			}
			b.StopTimer()
			if n := srv.calls.Load(); n != 1 {
				b.Fatalf("%d calls, want only the cold one", n)
			}
		})
	}
}
