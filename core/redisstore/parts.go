package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterParts is the slot table of a Store from New on a
// *redis.ClusterClient, for Store.Partition: which master serves each slot.
// go-redis keeps its own but does not show it, so the store reads one from
// the Cluster itself, lazily: Partition starts a read in the background when
// the table is due one (at first, slotsRefresh after the last read, after a
// store call failed: a failover moves slots) and never waits for it. Reads
// run one at a time, at most one per slotsRetry; each asks a master that
// answered before first and tries at most partsTries masters, each for at
// most slotsRetry (or the client's ReadTimeout when its ContextTimeoutEnabled
// is off), so a hung master delays a read, never a check.
type clusterParts struct {
	client *redis.ClusterClient
	table  atomic.Pointer[slotTable]
	due    atomic.Bool // a read is due
	busy   atomic.Bool // a read runs, or ended less than slotsRetry ago

	// Only read uses these, and reads run one after another.
	ids   partIDs
	last  string      // the master that answered the last read
	timer *time.Timer // marks the table due slotsRefresh after a read
}

// partsTries bounds the masters one read asks for the slot table.
const partsTries = 3

func newClusterParts(c *redis.ClusterClient) *clusterParts {
	p := &clusterParts{client: c}
	p.due.Store(true)
	return p
}

// load returns the slot table, nil until the first read ends, starting a
// read when one is due.
func (p *clusterParts) load() *slotTable {
	if p.due.Load() && p.busy.CompareAndSwap(false, true) {
		go p.read()
	}
	return p.table.Load()
}

// expire marks the table due for a read: slotsRefresh after the last, or
// after a failed store call.
func (p *clusterParts) expire() { p.due.Store(true) }

// read reads the slot table and marks it due again in slotsRefresh, or at
// once after a failure: the next read may start slotsRetry later.
func (p *clusterParts) read() {
	p.due.Store(false) // a call that fails meanwhile asks for another read
	ranges, err := p.fetch()
	if err != nil {
		p.due.Store(true)
	} else {
		p.table.Store(newSlotTable(ranges, p.table.Load(), &p.ids, nil))
		if p.timer == nil {
			p.timer = time.AfterFunc(slotsRefresh, p.expire)
		} else {
			p.timer.Reset(slotsRefresh)
		}
	}
	time.AfterFunc(slotsRetry, func() { p.busy.Store(false) })
}

// fetch reads the slot ranges: from the client's ClusterSlots function when
// it has one (as go-redis does), else by CLUSTER SLOTS on a master, the one
// that answered last first, then others in random order.
func (p *clusterParts) fetch() ([]slotRange, error) {
	if f := p.client.Options().ClusterSlots; f != nil {
		ctx, cancel := context.WithTimeout(context.Background(), slotsRetry)
		defer cancel()
		slots, err := f(ctx)
		if err != nil {
			return nil, fmt.Errorf("redisstore: slot table: %w", err)
		}
		return slotRanges(slots), nil
	}
	var mu sync.Mutex
	var masters []*redis.Client
	ctx, cancel := context.WithTimeout(context.Background(), slotsRetry)
	err := p.client.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		masters = append(masters, c)
		mu.Unlock()
		return nil
	})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("redisstore: slot table: %w", err)
	}
	rand.Shuffle(len(masters), func(i, j int) { masters[i], masters[j] = masters[j], masters[i] })
	if i := slices.IndexFunc(masters, func(c *redis.Client) bool { return c.Options().Addr == p.last }); i > 0 {
		masters[0], masters[i] = masters[i], masters[0]
	}
	if len(masters) == 0 {
		return nil, errors.New("redisstore: slot table: no master known")
	}
	var errs []error
	for _, c := range masters[:min(len(masters), partsTries)] {
		ctx, cancel := context.WithTimeout(context.Background(), slotsRetry)
		slots, err := c.ClusterSlots(ctx).Result() //nolint:staticcheck // go-redis reads it too; Redis 6 has no CLUSTER SHARDS
		cancel()
		if err == nil {
			p.last = c.Options().Addr
			return slotRanges(slots), nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", c.Options().Addr, err))
	}
	return nil, fmt.Errorf("redisstore: slot table: %w", errors.Join(errs...))
}

// slotRanges are go-redis' slot ranges, each with its master's address.
func slotRanges(slots []redis.ClusterSlot) []slotRange {
	ranges := make([]slotRange, 0, len(slots))
	for _, s := range slots {
		if len(s.Nodes) > 0 {
			ranges = append(ranges, slotRange{int64(s.Start), int64(s.End), s.Nodes[0].Addr})
		}
	}
	return ranges
}
