package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// queued reports how many checks wait for the combiner's next DoMulti.
func (m *combiner) queued() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue)
}

// pausedStore returns a Store on a server of its own whose combiner lets one
// call be in flight at a time, after a first check, with the server then
// stopped (SIGSTOP) until resume (called at cleanup too, once), and how many
// DoMulti calls the store has made.
func pausedStore(t *testing.T, k keyer) (*Store, *redistest.Server, func() int, func()) {
	t.Helper()
	srv := redistest.StartServer(t)
	r := &recordingClient{}
	s := recordedStoreOn(t, srv.URL(), r)
	s.dialed.combine.limit = 1 // one in flight: every later call queues
	eval(t, s, check, k.count("warm", 10, 1))
	trips := func() int { r.mu.Lock(); defer r.mu.Unlock(); return r.trips }
	srv.Pause(t)
	var once sync.Once
	resume := func() { once.Do(func() { srv.Resume(t) }) }
	t.Cleanup(resume)
	return s, srv, trips, resume
}

// answer is what call i of a test returned: a check's outcomes, or a batch's.
type answer struct {
	i    int
	outs [][]ratelimit.OpResult
	err  error
}

// The checks that arrive while one is in flight go out together in one
// DoMulti once it returns, each with its own replies; a check whose context
// ends while it waits returns at once and nothing of it is sent. The server
// is stopped (SIGSTOP) so that the first check stays in flight.
func TestPlainChecksCombined(t *testing.T) {
	k := newKeyer(t)
	s, srv, trips, resume := pausedStore(t, k)
	base := trips()
	answers := make(chan answer, 16)
	run := func(c context.Context, i int, op ratelimit.Op) {
		out, err := s.Eval(c, check, []ratelimit.Op{op})
		answers <- answer{i, [][]ratelimit.OpResult{out}, err}
	}
	long, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go run(long, 0, k.count("first", 10, 1))
	waitFor(t, "the first check in flight", func() bool { return trips() == base+1 })
	const n = 8
	for i := 1; i <= n; i++ {
		go run(long, i, k.count(fmt.Sprint("q", i), 10, float64(i)))
	}
	waitFor(t, "8 checks queued", func() bool { return s.dialed.combine.queued() == n })
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	go run(short, n+1, k.count("gave_up", 10, 1))
	if a := <-answers; a.i != n+1 || !errors.Is(a.err, context.DeadlineExceeded) {
		t.Fatalf("first answer: check %d, %v; want the queued check with a short deadline to give up", a.i, a.err)
	}
	resume()
	for range n + 1 {
		a := <-answers
		if a.err != nil {
			t.Fatalf("check %d: %v", a.i, a.err)
		}
		want := float64(max(a.i, 1)) // check i costs i, the first 1
		if got := a.outs[0][0].Count; got != want {
			t.Errorf("check %d: count %v, want %v (its own reply)", a.i, got, want)
		}
	}
	if got := trips() - base; got != 2 {
		t.Errorf("%d DoMulti calls for the first check and 8 queued ones, want 2", got)
	}
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer raw.Close()
	if n, err := raw.Exists(ctx, k.key("gave_up")).Result(); err != nil || n != 0 {
		t.Errorf("the check that gave up while queued was sent: EXISTS = %d, %v", n, err)
	}
	if got := s.dialed.combine.queued(); got != 0 {
		t.Errorf("%d checks still queued", got)
	}
}

// On a Cluster, checks are combined per master only: while one master hangs
// (SIGSTOP) with a check in flight and more queued for it, checks for the
// other master answer at once, and the queued ones go out in one DoMulti when
// it resumes. A private 2-master cluster, so that the shared one never stops.
func TestClusterChecksCombinedPerNode(t *testing.T) {
	nodes := redistest.StartCluster(t, 2)
	r := &recordingClient{}
	s := recordedStoreOn(t, "redis://"+nodes[0].Addr+"?addr="+nodes[1].Addr, r)
	k := newKeyer(t)
	// The table is fetched on connecting, and again a second later if that failed.
	var tbl *slotTable
	waitFor(t, "a slot table of 2 masters", func() bool {
		tbl = s.dialed.nodes.table.Load()
		return tbl != nil && len(tbl.combiners) == 2
	})
	for _, m := range tbl.combiners {
		m.limit = 1 // one in flight per master: every later check for it queues
	}
	// names[i]: keys on nodes[i] (the first holds slots 0-8191)
	var names [2][]string
	for i := 0; len(names[0]) < 4 || len(names[1]) < 3; i++ {
		name := fmt.Sprint("n", i)
		n := slot(k.key(name)) * 2 / numSlots
		names[n] = append(names[n], name)
	}
	hung := tbl.combiners[tbl.node[slot(k.key(names[0][0]))]]
	eval(t, s, check, k.count("warm"+names[0][0], 10, 1), k.count(names[1][0], 10, 1))
	trips := func() int { r.mu.Lock(); defer r.mu.Unlock(); return r.trips }
	base := trips()

	nodes[0].Pause(t)
	var once sync.Once
	resume := func() { once.Do(func() { nodes[0].Resume(t) }) }
	defer resume()
	answers := make(chan answer, 8)
	long, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	run := func(i int) { // names[0][i]
		out, err := s.Eval(long, check, []ratelimit.Op{k.count(names[0][i], 10, 1)})
		answers <- answer{i, [][]ratelimit.OpResult{out}, err}
	}
	go run(0)
	waitFor(t, "the first check in flight", func() bool { return trips() == base+1 })
	for i := 1; i < len(names[0]); i++ {
		go run(i)
	}
	waitFor(t, "3 checks queued for the hung master", func() bool { return hung.queued() == 3 })
	for _, name := range names[1] {
		bctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		out, err := s.Eval(bctx, check, []ratelimit.Op{k.count(name, 10, 1)})
		cancel()
		if err != nil {
			t.Fatalf("check on the other master while one hangs: %v", err)
		}
		want := 1.0
		if name == names[1][0] {
			want = 2 // counted once before the pause
		}
		if out[0].Count != want {
			t.Errorf("check on %s: count %v, want %v", name, out[0].Count, want)
		}
	}
	resume()
	for range names[0] {
		if a := <-answers; a.err != nil || a.outs[0][0].Count != 1 {
			t.Errorf("check on the resumed master (%s): %+v, %v", names[0][a.i], a.outs, a.err)
		}
	}
	if got, want := trips()-base, 1+1+len(names[1]); got != want {
		t.Errorf("%d DoMulti calls, want %d: the first check, one for the 3 queued, one per check on the other master", got, want)
	}
}

// A batch of plain-form checks (an Envoy request's descriptors) is combined
// as a single check is: batches that arrive while a call is in flight go out
// together in one DoMulti once it returns, each check with its own replies.
func TestPlainBatchesCombined(t *testing.T) {
	k := newKeyer(t)
	s, _, trips, resume := pausedStore(t, k)
	base := trips()
	answers := make(chan answer, 8)
	long, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() {
		out, err := s.Eval(long, check, []ratelimit.Op{k.count("first", 10, 1)})
		answers <- answer{0, [][]ratelimit.OpResult{out}, err}
	}()
	waitFor(t, "the first check in flight", func() bool { return trips() == base+1 })
	const n = 3
	for i := 1; i <= n; i++ {
		go func() {
			// Batch i: two checks, of cost i and 10 × i.
			batch := [][]ratelimit.Op{
				{k.count(fmt.Sprint("a", i), 100, float64(i))},
				{k.count(fmt.Sprint("b", i), 100, float64(10*i))},
			}
			outs, err := s.EvalBatch(long, check, batch)
			answers <- answer{i, outs, err}
		}()
	}
	waitFor(t, "3 batches queued", func() bool { return s.dialed.combine.queued() == n })
	resume()
	for range n + 1 {
		a := <-answers
		if a.err != nil {
			t.Fatalf("call %d: %v", a.i, a.err)
		}
		if a.i == 0 {
			continue
		}
		if got := []float64{a.outs[0][0].Count, a.outs[1][0].Count}; got[0] != float64(a.i) || got[1] != float64(10*a.i) {
			t.Errorf("batch %d: counts %v, want [%d %d] (its own replies)", a.i, got, a.i, 10*a.i)
		}
	}
	if got := trips() - base; got != 2 {
		t.Errorf("%d DoMulti calls for the first check and 3 queued batches, want 2", got)
	}
}

// TestCombinerSharedLimit: on a Cluster the limit of calls in flight counts
// every master's together, except that a master with none in flight always
// sends at once; on one server it counts the combiner's own.
func TestCombinerSharedLimit(t *testing.T) {
	for _, tt := range []struct {
		name            string
		running, shared int32
		hasShared       bool
		want            bool
	}{
		{"one server, below the limit", 3, 0, false, true},
		{"one server, at the limit", maxInFlight, 0, false, false},
		{"cluster, all below the limit", 2, maxInFlight - 1, true, true},
		{"cluster, others at the limit", 2, maxInFlight, true, false},
		{"cluster, none of this master's in flight", 0, 3 * maxInFlight, true, true},
		{"cluster, this master at the limit", maxInFlight, maxInFlight, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := &combiner{running: int(tt.running)}
			if tt.hasShared {
				m.shared = new(atomic.Int32)
				m.shared.Store(tt.shared)
			}
			if got := m.free(); got != tt.want {
				t.Errorf("free() = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestClusterInFlightReturnsToZero: after many concurrent checks on a
// Cluster, every call counted in flight (per master and over all masters)
// has been counted out again.
func TestClusterInFlightReturnsToZero(t *testing.T) {
	s := dialStore(t, redistest.ClusterURL(t))
	k := newKeyer(t)
	waitFor(t, "a slot table", func() bool { return s.dialed.nodes.table.Load() != nil })
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				if _, err := s.Eval(ctx, check, []ratelimit.Op{k.count(fmt.Sprint("c", g, "-", i%7), 1<<40, 1)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	waitFor(t, "no call in flight", func() bool {
		if s.dialed.nodes.inFlight.Load() != 0 {
			return false
		}
		for _, m := range s.dialed.nodes.table.Load().combiners {
			m.mu.Lock()
			running := m.running
			m.mu.Unlock()
			if running != 0 {
				return false
			}
		}
		return true
	})
}

// Close ends a slot table refresh in flight and waits for it: a refresh that
// a timer started just before Close, on a cluster whose nodes hang (SIGSTOP),
// is over when Close returns, rather than waiting out its fetch's timeout
// after the store is gone. A private cluster, so that the shared one never
// stops.
func TestCloseEndsSlotRefreshInFlight(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	s := dialStore(t, "redis://"+nodes[0].Addr+"?addr="+nodes[1].Addr+"&addr="+nodes[2].Addr)
	n := &s.dialed.nodes
	waitFor(t, "a slot table of 3 masters", func() bool {
		tbl := n.table.Load()
		return tbl != nil && len(tbl.combiners) == 3
	})
	for _, node := range nodes {
		node.Pause(t)
		defer node.Resume(t)
	}
	n.mu.Lock()
	n.next.Reset(0) // the next refresh, now
	n.mu.Unlock()
	waitFor(t, "a slot table fetch in flight", func() bool { return refreshing(t) })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if refreshing(t) {
		t.Fatal("a slot table refresh runs after Close returned")
	}
}

// refreshing reports whether a goroutine runs a slot table refresh.
func refreshing(t *testing.T) bool {
	t.Helper()
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Contains(buf[:n], []byte("redisstore.(*nodeCombiners).refresh"))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Partition names the master of a key's slot, as the Cluster itself says,
// by one number per master that a refresh of the slot table keeps, on a
// Store from Dial and on one from New on a *redis.ClusterClient (which had
// no parts: its Limiter kept one breaker); it is -1 on a single server and
// a Ring, whose Limiter keeps its one breaker.
func TestPartitionIsTheKeysMaster(t *testing.T) {
	for _, tc := range []struct {
		name    string
		store   func(t *testing.T) *Store
		refresh func(s *Store) error
	}{
		{"dial", func(t *testing.T) *Store { return dialStore(t, redistest.ClusterURL(t)) },
			func(s *Store) error { return s.dialed.nodes.fetch(ctx) }},
		{"new", func(t *testing.T) *Store { return New(redistest.ClusterClient(t)) },
			func(s *Store) error {
				for !s.parts.busy.CompareAndSwap(false, true) { // reads run one at a time
					time.Sleep(10 * time.Millisecond)
				}
				s.parts.read()
				return nil
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.store(t)
			waitFor(t, "a slot table", func() bool { return s.Partition("{k}") >= 0 })
			testPartitionIsTheKeysMaster(t, s, func() error { return tc.refresh(s) })
		})
	}
	t.Run("one_breaker", func(t *testing.T) {
		for name, s := range map[string]*Store{
			"dial": dialStore(t, redistest.URL(t)), "new": New(redistest.Client(t)), "ring": New(newRing(t)),
		} {
			k := newKeyer(t)
			if _, err := s.Eval(ctx, ratelimit.ModeCheck, []ratelimit.Op{terminal(k.count("a", 10, 1))}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if p := s.Partition("{k}"); p != -1 {
				t.Errorf("%s: a single server's or a Ring's Partition = %d, want -1", name, p)
			}
		}
	})
}

func testPartitionIsTheKeysMaster(t *testing.T, s *Store, refresh func() error) {
	c := redistest.ClusterClient(t)
	parts := map[string]int{} // by master address
	for i := range 64 {
		key := fmt.Sprint("{part", i, "}")
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		p := s.Partition(key)
		if p < 0 || p >= noNode {
			t.Fatalf("Partition(%s) = %d", key, p)
		}
		if name := s.PartitionName(p); name != m.Options().Addr {
			t.Fatalf("part %d of %s is named %q, its master is %s", p, key, name, m.Options().Addr)
		}
		if q, ok := parts[m.Options().Addr]; ok && q != p {
			t.Fatalf("master %s is parts %d and %d", m.Options().Addr, q, p)
		}
		parts[m.Options().Addr] = p
	}
	if len(parts) < 2 {
		t.Fatalf("64 keys on %d masters", len(parts))
	}
	if err := refresh(); err != nil {
		t.Fatal(err)
	}
	for addr, p := range parts {
		if name := s.PartitionName(p); name != addr {
			t.Errorf("after a refresh part %d is %q, was %s", p, name, addr)
		}
	}
}

// A master keeps its part id; once noNode addresses have had one, the ids
// of masters in neither the old table nor the new are handed out again, and
// none is when every id is in use.
func TestPartIDsRecycledWhenSpent(t *testing.T) {
	n := &partIDs{}
	addr := func(i int) string { return fmt.Sprint("10.0.", i/250, ".", i%250, ":6379") }
	for i := range noNode {
		if id := n.partID(addr(i), &slotTable{}, nil); int(id) != i {
			t.Fatalf("address %d got id %d", i, id)
		}
	}
	if id := n.partID(addr(7), &slotTable{}, nil); id != 7 {
		t.Fatalf("address 7 again: id %d", id)
	}
	old := &slotTable{addrs: []string{addr(0), addr(1)}, ids: []uint8{0, 1}}
	if id := n.partID(addr(noNode), &slotTable{}, old); id != 2 {
		t.Fatalf("a new address once every id was given: id %d, want 2 (the first not in the tables)", id)
	}
	if id := n.partID(addr(1), &slotTable{}, old); id != 1 {
		t.Fatalf("a master of the old table lost its id: %d", id)
	}
	full := &slotTable{}
	for i := range noNode {
		full.addrs, full.ids = append(full.addrs, addr(1000+i)), append(full.ids, uint8(i))
	}
	n.ids = map[string]uint8{}
	for i := range noNode {
		n.ids[addr(1000+i)] = uint8(i)
	}
	if id := n.partID(addr(2000), &slotTable{}, full); id != noNode {
		t.Fatalf("every id in use: id %d, want noNode", id)
	}
}
