package redisstore

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// windows remembers when the windows of the counters this Store charged end,
// so that the next check of a counter whose window is still on sends INCRBY
// alone, in the plain form or in the script (its known-window forms), not
// INCRBY, PEXPIRE NX and PTTL: on one Redis
// core that is the difference between about 4.3k and 14.5k instructions per
// check (callgrind over pipelined commands), and the reason a check costs
// Redis less than the two commands (INCRBY, EXPIRE) of fixed-window peers.
//
// An end is remembered from a PTTL read in the same round trip as the
// counter's INCRBY, counted from when the check was sent, so it is never
// later than the window's real end (it is earlier by at most that round
// trip). A counter whose key is gone before its remembered end (deleted by
// `ratekit clear` in another process, evicted, lost in a failover) is
// created again by INCRBY without a TTL: INCRBY then answers no more than
// the cost, and decodePlain (settle after the script) sets the window and
// reads its TTL in a second round trip. Were that round trip lost too (the process stopped between
// the two), the next check sent in the full form, at the latest when the
// remembered end has passed, sets the TTL: such a window lasts at most one
// period longer.
//
// The table is fixed: windowSlots entries of 8 bytes (128 KiB per Store
// from Dial or Open), each a key's hash tag and its window's end, in sets of
// windowWays that share a cache line: a key takes a place in the set its
// hash picks, in place of the entry whose window ends first (an empty or
// ended one before any other), so the keys charged most recently stay. With
// one entry per key (direct-mapped), 5,000 keys (1,000 clients of 5 rules)
// lost a quarter of their windows to keys of the same entry; with sets of 4
// a few in a hundred. A wrong tag match (4 in 2^24 among keys sharing a set)
// costs only a wrong TTL in that check's result, never a wrong count.
type windows struct {
	seed  maphash.Seed
	start time.Time // the origin of the ends, in ms; monotonic
	slots [windowSlots]atomic.Uint64
}

const (
	windowSlots = 1 << 14
	windowWays  = 4  // entries per set
	windowTag   = 40 // a slot holds tag<<windowTag | end, end in ms since start
	windowEnd   = 1<<windowTag - 1
	// windowMargin is the least time left in a remembered window for a check
	// to rely on it: a check sent with less goes in the full form, so that a
	// check that reaches Redis late is unlikely to count in the next window
	// while reporting this one's TTL.
	windowMargin = 50 // ms
)

func newWindows() *windows {
	return &windows{seed: maphash.MakeSeed(), start: time.Now()}
}

// now is the time in the ms of the ends.
func (w *windows) now() int64 { return time.Since(w.start).Milliseconds() }

// set returns the entries of the set that hash h picks.
func (w *windows) set(h uint64) *[windowWays]atomic.Uint64 {
	i := h & (windowSlots/windowWays - 1) * windowWays
	return (*[windowWays]atomic.Uint64)(w.slots[i : i+windowWays])
}

// left returns the ms left in key's window at now when it is remembered with
// at least windowMargin left, else 0.
func (w *windows) left(key string, now int64) int64 {
	h := maphash.String(w.seed, key)
	set := w.set(h)
	for i := range set {
		v := set[i].Load()
		if v>>windowTag != h>>windowTag {
			continue
		}
		if left := int64(v&windowEnd) - now; left >= windowMargin {
			return left
		}
		return 0
	}
	return 0
}

// remember records that key's window ends ttl ms after sent (a time from
// now).
func (w *windows) remember(key string, sent, ttl int64) {
	end := sent + ttl
	if ttl < windowMargin || end > windowEnd {
		return
	}
	h := maphash.String(w.seed, key)
	set, victim, first := w.set(h), 0, int64(windowEnd+1)
	for i := range set {
		v := set[i].Load()
		if v>>windowTag == h>>windowTag {
			victim = i
			break
		}
		if e := int64(v & windowEnd); e < first {
			victim, first = i, e
		}
	}
	set[victim].Store(h>>windowTag<<windowTag | uint64(end))
}

// forget drops what is remembered of key's window (its key was deleted).
func (w *windows) forget(key string) {
	h := maphash.String(w.seed, key)
	set := w.set(h)
	for i := range set {
		if v := set[i].Load(); v>>windowTag == h>>windowTag {
			set[i].CompareAndSwap(v, 0)
		}
	}
}
