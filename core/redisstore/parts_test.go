package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// A Store from New on a *redis.ClusterClient reads its slot table again
// after a failed call without the master that hangs, even when that master
// answered the last read (it is asked first): the read moves on to one that
// answers, and checks on that master are served meanwhile. A private
// 2-master cluster whose nodes wait a minute before they call the hung one
// failed.
func TestNewSlotTableReadWithAMasterHung(t *testing.T) {
	redistest.URL(t) // same skip rule as the other private servers
	nodes := redistest.StartCluster(t, 2, "--cluster-node-timeout", "60000")
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr, nodes[1].Addr}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s := New(c)
	k := newKeyer(t)
	var on [2]string // a key name on each master
	for i := 0; on[0] == "" || on[1] == ""; i++ {
		name := string(rune('a' + i))
		on[slot(k.key(name))*2/numSlots] = name
	}
	waitFor(t, "a slot table", func() bool { return s.Partition(k.key(on[0])) >= 0 })
	p0, p1 := s.Partition(k.key(on[0])), s.Partition(k.key(on[1]))
	if p0 == p1 || s.PartitionName(p0) != nodes[0].Addr || s.PartitionName(p1) != nodes[1].Addr {
		t.Fatalf("parts %d (%s) and %d (%s), want one per master %s, %s",
			p0, s.PartitionName(p0), p1, s.PartitionName(p1), nodes[0].Addr, nodes[1].Addr)
	}
	for !s.parts.busy.CompareAndSwap(false, true) { // no read runs: last is the test's
		time.Sleep(10 * time.Millisecond)
	}
	s.parts.last = nodes[0].Addr
	s.parts.busy.Store(false)
	before := s.parts.table.Load()

	nodes[0].Pause(t)
	defer nodes[0].Resume(t)
	hungCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := s.Eval(hungCtx, ratelimit.ModeCheck, []ratelimit.Op{terminal(k.count(on[0], 10, 1))})
	cancel()
	if err == nil {
		t.Fatal("a check on the hung master succeeded")
	}
	waitFor(t, "a slot table read with a master hung", func() bool {
		s.Partition(k.key(on[1])) // starts the read that is due
		return s.parts.table.Load() != before
	})
	if q0, q1 := s.Partition(k.key(on[0])), s.Partition(k.key(on[1])); q0 != p0 || q1 != p1 {
		t.Errorf("after the read the parts are %d and %d, were %d and %d", q0, q1, p0, p1)
	}
	if s.parts.last != nodes[1].Addr {
		t.Errorf("the read was answered by %q, want %s", s.parts.last, nodes[1].Addr)
	}
	if _, err := s.Eval(ctx, ratelimit.ModeCheck, []ratelimit.Op{terminal(k.count(on[1], 10, 1))}); err != nil {
		t.Errorf("a check on the master that answers: %v", err)
	}
}
