package ratelimit

import (
	"sync"
	"sync/atomic"
	"time"
)

// The background sweep of a MemoryStore reclaims the expired entries of
// shards that no check writes any more (after a burst of distinct callers,
// say), which the sweep on the write path never reaches. It is bounded: each
// round examines at most sweepPerShard entries of a shard, sweepBatch at a
// time under the shard's lock, and moves on from a shard as soon as a batch
// finds fewer than a quarter of its entries expired (Redis' active expiry
// works the same way), so a round never holds a lock for long nor costs
// more than a bounded number of entries however large the store.
const (
	sweepBatch    = 128
	sweepPerShard = 8 * sweepBatch
)

// janitor schedules the background sweep. It runs no goroutine of its own:
// a round is a timer's function, scheduled only while the store holds
// entries, so an idle or empty store costs nothing and a store that is
// dropped without Close is freed once its entries have expired.
type janitor struct {
	s *MemoryStore
	// idle: no round is scheduled. A check that wrote loads it (one atomic
	// load while a round is scheduled) and schedules one when set.
	idle   atomic.Bool
	mu     sync.Mutex // held by schedule, a whole round and Close
	timer  *time.Timer
	closed bool
}

func (j *janitor) init(s *MemoryStore) {
	j.s = s
	j.idle.Store(true)
}

// wake schedules a round unless one is scheduled.
func (j *janitor) wake() {
	if j.idle.Load() {
		j.schedule()
	}
}

func (j *janitor) schedule() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed || !j.idle.Load() {
		return
	}
	j.idle.Store(false)
	if j.timer == nil {
		j.timer = time.AfterFunc(j.s.sweep, j.round)
		return
	}
	j.timer.Reset(j.s.sweep)
}

// round sweeps every shard once, within the bounds, and schedules the next
// round while entries are left.
func (j *janitor) round() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	now := j.s.now()
	left := 0
	for i := range j.s.shards {
		left += j.s.shards[i].sweepBounded(now)
	}
	if left == 0 {
		// Go idle, then look again: a check that added an entry after its
		// shard was counted either is seen now or sees idle and wakes us.
		j.idle.Store(true)
		if j.s.Len() == 0 {
			return
		}
		j.idle.Store(false)
	}
	j.timer.Reset(j.s.sweep)
}

// sweepBounded drops expired entries of sh, examining at most sweepPerShard
// of them, and returns how many entries it leaves. A round runs it on every
// shard, and a check on the shard it wrote when one is due (sweepDue).
func (sh *memShard) sweepBounded(now time.Time) int {
	for examined := 0; ; {
		sh.mu.Lock()
		sh.peak = max(sh.peak, len(sh.m))
		n, expired := 0, 0
		for k, e := range sh.m { // from a random place: each batch looks somewhere else
			if n == sweepBatch {
				break
			}
			n++
			if !now.Before(e.expire) {
				delete(sh.m, k)
				expired++
			}
		}
		examined += n
		done := n < sweepBatch || expired*4 < n || examined >= sweepPerShard
		left := len(sh.m)
		if done {
			sh.shrink()
			sh.swept = left
		}
		sh.mu.Unlock()
		if done {
			return left // all seen, mostly live, or this round's share done
		}
	}
}

// shrink gives back the table of a map that has emptied: a Go map keeps the
// room of its largest size after deletes. peak is the largest size the
// sweeps have seen; the live entries are copied into a map of their size
// once they are under a quarter of it, and at most sweepPerShard of them, so
// that the copy under the lock stays bounded. Called with sh.mu held.
func (sh *memShard) shrink() {
	if n := len(sh.m); sh.peak >= 4*sweepBatch && n <= sh.peak/4 && n <= sweepPerShard {
		m := make(map[string]*memEntry, n)
		for k, e := range sh.m {
			m[k] = e
		}
		sh.m, sh.peak = m, n
	}
}

// Close stops the background sweep of expired entries and waits for a round
// in progress. The store keeps counting after Close; its expired entries are
// then dropped only by the sweep on the write path and when read. Close
// always returns nil.
func (s *MemoryStore) Close() error {
	j := &s.janitor
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	j.idle.Store(false) // checks stop looking
	if j.timer != nil {
		j.timer.Stop()
	}
	return nil
}
