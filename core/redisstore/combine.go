package redisstore

import (
	"cmp"
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// combiner sends the plain-form commands of concurrent checks in few DoMulti
// calls: a check sends its own at once while fewer than maxInFlight are in
// flight, and the checks that arrive meanwhile go out together when one of
// those returns. rueidis writes each DoMulti as soon as its writer reaches
// it, so without this 64 callers on two cores cost about 0.85 write syscalls
// per check, half of the client's CPU. A lone caller never waits. See doc.go
// ("Pipelining") for what it buys.
type combiner struct {
	mu      sync.Mutex
	running int           // DoMulti calls of this combiner in flight
	limit   int           // the most at once before checks queue; 0: maxInFlight
	shared  *atomic.Int32 // on a Cluster, the calls in flight of every master's combiner
	queue   []*waiter     // the checks that arrived meanwhile
	spare   []*waiter     // the previous queue's array, for reuse
}

// waiter is one queued check: its commands and, once sent, its replies.
type waiter struct {
	cmds     rueidis.Commands
	res      []rueidis.RedisResult
	deadline time.Time // zero: none
	state    atomic.Int32
	done     chan struct{} // receives once res is set
}

// States of a waiter: queued, taken into a DoMulti, or abandoned by a caller
// whose context ended first (it is then skipped, or its replies dropped).
const (
	waiterQueued int32 = iota
	waiterTaken
	waiterAbandoned
)

// maxInFlight is how many DoMulti calls a combiner lets run at once before
// checks queue, so that a few callers still overlap their round trips as
// they do without it. BenchmarkLimiterCheck/dial/rules=1 against no
// combiner, medians of 4 alternating runs: with 8, 1.0x at 4 to 16 callers,
// 1.24x at 32, 1.58x at 64; with 4, 0.75x at 8 callers; with 1, 0.73x at 4.
const maxInFlight = 8

var waiters = sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}

// doMulti returns the replies of cmds, sent on c alone or with the commands
// of concurrent calls. A call whose ctx ends before its replies came returns
// ctx's error; its commands may still run.
func (m *combiner) doMulti(ctx context.Context, c rueidis.Client, cmds rueidis.Commands) ([]rueidis.RedisResult, error) {
	m.mu.Lock()
	if m.free() {
		m.running++
		if m.shared != nil {
			m.shared.Add(1)
		}
		m.mu.Unlock()
		var res []rueidis.RedisResult
		if len(cmds) == 1 {
			// A lone INCRBY (a counter whose window the Store knows): Do
			// spares the allocations of DoMulti, nine a call on a Cluster
			// client against the one of this slice.
			res = []rueidis.RedisResult{c.Do(ctx, cmds[0])}
		} else {
			res = c.DoMulti(ctx, cmds...)
		}
		m.drain(c)
		return res, nil
	}
	w := waiters.Get().(*waiter)
	w.cmds, w.res = cmds, nil
	w.deadline, _ = ctx.Deadline()
	w.state.Store(waiterQueued)
	m.queue = append(m.queue, w)
	m.mu.Unlock()
	select {
	case <-w.done:
		res := w.res
		w.cmds, w.res = nil, nil
		waiters.Put(w)
		return res, nil
	case <-ctx.Done():
		// Taken or not, w is not reused: a sender may still set it.
		w.state.CompareAndSwap(waiterQueued, waiterAbandoned)
		return nil, ctx.Err()
	}
}

// free reports whether a check may go out at once: while fewer than the
// limit of calls are in flight, on a Cluster counted over every master, but
// always when none of this master's is, so that a master's checks never
// wait for another master's replies (doc.go, "Pipelining", has the figures).
func (m *combiner) free() bool {
	limit := cmp.Or(m.limit, maxInFlight)
	if m.running >= limit {
		return false
	}
	return m.shared == nil || m.running == 0 || int(m.shared.Load()) < limit
}

// drain ends the caller's turn: the checks queued meanwhile go out on a
// goroutine of their own (the caller has its replies and returns).
func (m *combiner) drain(c rueidis.Client) {
	if batch := m.next(); batch != nil {
		go m.send(c, batch)
	}
}

// next takes the queue, or ends the turn when it is empty.
func (m *combiner) next() []*waiter {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.queue) == 0 {
		m.running--
		if m.shared != nil {
			m.shared.Add(-1)
		}
		return nil
	}
	batch := m.queue
	m.queue, m.spare = m.spare[:0], nil
	return batch
}

// send sends the commands of the waiters of batch that still wait in one
// DoMulti and hands each its replies, then the next queue, until none is.
func (m *combiner) send(c rueidis.Client, batch []*waiter) {
	var cmds rueidis.Commands
	for ; batch != nil; batch = m.next() {
		var deadline time.Time
		forever := false
		taken := batch[:0]
		for _, w := range batch {
			if !w.state.CompareAndSwap(waiterQueued, waiterTaken) {
				continue // its caller gave up: nothing of it is sent
			}
			taken = append(taken, w)
			cmds = append(cmds, w.cmds...)
			if w.deadline.IsZero() {
				forever = true
			} else if w.deadline.After(deadline) {
				deadline = w.deadline
			}
		}
		if len(taken) > 0 {
			// The replies are awaited as long as one of the callers waits.
			ctx, cancel := context.Background(), func() {}
			if !forever {
				ctx, cancel = context.WithDeadline(ctx, deadline)
			}
			res := c.DoMulti(ctx, cmds...)
			cancel()
			if !settled(res) {
				cmds = nil // rueidis may still be writing them: not reused
			}
			for _, w := range taken {
				n := len(w.cmds)
				w.res, res = res[:n:n], res[n:]
				w.done <- struct{}{}
			}
		}
		clear(cmds)
		cmds = cmds[:0]
		clear(batch)
		m.mu.Lock()
		if m.spare == nil {
			m.spare = batch[:0]
		}
		m.mu.Unlock()
	}
}

// nodeCombiners holds a combiner per master of a Cluster, so that a check is
// combined only with checks bound for the same node: a combined call waits
// for all its replies, and a hung node must hold up its own checks only.
// Which master serves a slot comes from CLUSTER SLOTS, fetched when the
// store connects and again every slotsRefresh, on a timer that Close stops;
// Close also cancels a fetch in flight and waits for it.
// A stale table only mixes two nodes' checks for a while: rueidis still
// routes each command by its slot. Until a table arrives, and for a check
// whose keys are on several nodes, calls are sent as they are, not combined.
type nodeCombiners struct {
	raw      rueidis.Client // the cluster client, unwrapped: refreshes are no check's round trip
	table    atomic.Pointer[slotTable]
	inFlight atomic.Int32 // the combiners' calls in flight (combiner.shared)

	ids partIDs // only fetch uses it, and fetches run one after another

	life    context.Context // the store's: canceled when it closes, ending a fetch in flight
	mu      sync.Mutex
	next    *time.Timer    // the next refresh
	stopped bool           // the store is closed: no more refreshes
	running sync.WaitGroup // the refresh a timer started, while it runs
}

// slotTable maps each slot to its master: its address, part id and, on a
// Store from Dial, its combiner.
type slotTable struct {
	node      [numSlots]uint8 // index in addrs; noNode: no master known
	combiners []*combiner     // of addrs[i]; nil on a Store from New
	addrs     []string
	ids       []uint8 // the part id of addrs[i], or noNode
}

// partIDs holds each master's part id (see Store.Partition), by address.
type partIDs struct{ ids map[string]uint8 }

// slotRange is a range of slots and the address of their master, as CLUSTER
// SLOTS tells them.
type slotRange struct {
	start, end int64
	addr       string
}

const (
	noNode = 255 // a table of more masters leaves the rest uncombined
	// slotsRefresh is how often the slot table is fetched again; after a
	// failed fetch, slotsRetry.
	slotsRefresh = 10 * time.Second
	slotsRetry   = time.Second
)

// doMulti is combiner.doMulti with the combiner of the node cmds are for.
func (n *nodeCombiners) doMulti(ctx context.Context, c rueidis.Client, cmds rueidis.Commands) ([]rueidis.RedisResult, error) {
	if t := n.table.Load(); t != nil {
		if i := t.nodeOf(cmds); i != noNode {
			return t.combiners[i].doMulti(ctx, c, cmds)
		}
	}
	return c.DoMulti(ctx, cmds...), nil
}

// partID returns the part id of the master at addr: the same for as long as
// the store lives, so that a Limiter's breaker of a master stays that
// master's across refreshes. Ids are below noNode; once noNode masters have
// come and gone, the ids of those in neither t nor old are handed out again
// (a Limiter's breaker of a departed master that is still open then closes
// at its prober's first probe, which peeks keys that have moved to a master
// that answers). noNode: no id free.
func (n *partIDs) partID(addr string, t, old *slotTable) uint8 {
	if id, ok := n.ids[addr]; ok {
		return id
	}
	if n.ids == nil || len(n.ids) >= noNode {
		keep := make(map[string]uint8)
		for _, tt := range []*slotTable{old, t} {
			for i := 0; tt != nil && i < len(tt.ids); i++ {
				if tt.ids[i] != noNode {
					keep[tt.addrs[i]] = tt.ids[i]
				}
			}
		}
		n.ids = keep
	}
	var used [noNode]bool
	for _, id := range n.ids {
		used[id] = true
	}
	id := slices.Index(used[:], false)
	if id < 0 {
		return noNode
	}
	n.ids[addr] = uint8(id)
	return uint8(id)
}

// nodeOf returns the index of the one master of all of cmds, or noNode.
func (t *slotTable) nodeOf(cmds rueidis.Commands) uint8 {
	i := t.node[cmds[0].Slot()]
	for j := 1; j < len(cmds); j++ {
		if t.node[cmds[j].Slot()] != i {
			return noNode
		}
	}
	return i
}

// start fetches the slot table from raw, then keeps it fresh until stop.
// life is the store's lifetime: once it is canceled, a fetch ends at once.
func (n *nodeCombiners) start(life context.Context, raw rueidis.Client) {
	n.raw, n.life = raw, life
	n.refresh()
}

// stop ends the refreshes: it stops the timer and waits for a refresh that
// it started (its fetch ends once the store's life is canceled, which Close
// does first), so that none outlives the store.
func (n *nodeCombiners) stop() {
	n.mu.Lock()
	n.stopped = true
	if n.next != nil {
		n.next.Stop()
	}
	n.mu.Unlock()
	n.running.Wait()
}

// refresh fetches the slot table and schedules the next fetch: in
// slotsRefresh, or in slotsRetry after a failure.
func (n *nodeCombiners) refresh() {
	wait := slotsRefresh
	if err := n.fetch(n.life); err != nil {
		wait = slotsRetry
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.stopped {
		n.next = time.AfterFunc(wait, n.tick)
	}
}

// tick is a timer's refresh, counted in running unless the store is closed.
func (n *nodeCombiners) tick() {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return
	}
	n.running.Add(1) // under mu, before stop's Wait
	n.mu.Unlock()
	defer n.running.Done()
	n.refresh()
}

// fetch reads the slot table, keeping the combiners of masters that stay.
func (n *nodeCombiners) fetch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, slotsRetry)
	defer cancel()
	reply, err := n.raw.Do(ctx, n.raw.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return err
	}
	ranges := make([]slotRange, 0, len(reply))
	for _, r := range reply {
		// start, end, [host, port, ...] of the master, then its replicas
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			continue
		}
		start, err1 := f[0].AsInt64()
		end, err2 := f[1].AsInt64()
		master, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 {
			continue
		}
		host, err1 := master[0].ToString()
		port, err2 := master[1].AsInt64()
		if err1 != nil || err2 != nil {
			continue
		}
		ranges = append(ranges, slotRange{start, end, net.JoinHostPort(host, strconv.FormatInt(port, 10))})
	}
	n.table.Store(newSlotTable(ranges, n.table.Load(), &n.ids, &n.inFlight))
	return nil
}

// newSlotTable returns the table of ranges, old being the one it replaces:
// each master keeps its part id from ids and, when inFlight is set (a Store
// from Dial), its combiner in old; a new master's combiner counts its calls
// in inFlight. A range out of bounds is left out.
func newSlotTable(ranges []slotRange, old *slotTable, ids *partIDs, inFlight *atomic.Int32) *slotTable {
	t := &slotTable{}
	for i := range t.node {
		t.node[i] = noNode
	}
	for _, r := range ranges {
		if r.start < 0 || r.end >= numSlots || r.start > r.end {
			continue
		}
		i := t.index(r.addr, old, ids, inFlight)
		for s := r.start; s <= r.end; s++ {
			t.node[s] = i
		}
	}
	return t
}

// index returns addr's index in t, adding it (with its part id and, when
// inFlight is set, its combiner in old, if any, else a new one counting its
// calls in inFlight) when new.
func (t *slotTable) index(addr string, old *slotTable, ids *partIDs, inFlight *atomic.Int32) uint8 {
	if i := slices.Index(t.addrs, addr); i >= 0 {
		return uint8(i)
	}
	if len(t.addrs) == noNode {
		return noNode
	}
	t.ids = append(t.ids, ids.partID(addr, t, old))
	t.addrs = append(t.addrs, addr)
	if inFlight != nil {
		m := &combiner{shared: inFlight}
		if old != nil {
			if i := slices.Index(old.addrs, addr); i >= 0 {
				m = old.combiners[i]
			}
		}
		t.combiners = append(t.combiners, m)
	}
	return uint8(len(t.addrs) - 1)
}
