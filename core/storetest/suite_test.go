package storetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
)

// stallingStore stalls before its second Eval, as a loaded machine may
// between two checks.
type stallingStore struct {
	ratelimit.Store
	stall time.Duration
	evals atomic.Int32
}

func (s *stallingStore) Eval(ctx context.Context, mode ratelimit.Mode, ops []ratelimit.Op) ([]ratelimit.OpResult, error) {
	if s.evals.Add(1) == 2 {
		time.Sleep(s.stall)
	}
	return s.Store.Eval(ctx, mode, ops)
}

// TestCaseOutlastsAStallOnARealClock: a case's reset, on a store that counts
// on a real clock (Redis), may lag by the real time the case has taken, so a
// 1.5s stall between two of its checks (longer than TTLTolerance) fails no
// correct case; it failed LimitAdmitsExactlyLimit's reset with the fixed 1s.
func TestCaseOutlastsAStallOnARealClock(t *testing.T) {
	client := redistest.Client(t)
	for _, c := range cases {
		if c.name != "LimitAdmitsExactlyLimit" {
			continue
		}
		c.runOn(t, &Harness{
			Store:        &stallingStore{Store: redisstore.New(client), stall: 1500 * time.Millisecond},
			Now:          time.Now,
			Advance:      func(t testing.TB, _ time.Duration) { t.Fatal("the case advances no time") },
			Prefix:       redistest.Prefix(t),
			TTLTolerance: time.Second,
		})
		return
	}
	t.Fatal("no case LimitAdmitsExactlyLimit")
}
