package redisstore

import (
	"hash/maphash"
	"strconv"
	"testing"
)

// forgetWindows makes a Store from Dial or Open read every window afresh: a
// test that shortens TTLs behind its back (time passing, as far as the
// counters can tell) calls it, as the Store's clock did not move.
func (s *Store) forgetWindows() {
	if s.dialed == nil {
		return
	}
	for i := range s.dialed.windows.slots {
		s.dialed.windows.slots[i].Store(0)
	}
}

func TestWindows(t *testing.T) {
	w := newWindows()
	const sent = 1000
	if got := w.left("a", sent); got != 0 {
		t.Fatalf("unknown key: left %d, want 0", got)
	}
	w.remember("a", sent, 60_000)
	tests := []struct {
		key  string
		now  int64
		want int64
	}{
		{"a", sent, 60_000},
		{"a", sent + 59_000, 1_000},
		{"a", sent + 60_000 - windowMargin, windowMargin},
		{"a", sent + 60_000 - windowMargin + 1, 0}, // too close to the end to rely on
		{"a", sent + 60_000, 0},
		{"a", sent + 120_000, 0},
		{"b", sent, 0},
	}
	for _, tt := range tests {
		if got := w.left(tt.key, tt.now); got != tt.want {
			t.Errorf("left(%q, %d) = %d, want %d", tt.key, tt.now, got, tt.want)
		}
	}

	w.remember("short", sent, windowMargin-1) // too short to rely on
	w.remember("far", sent, windowEnd)        // past what a slot holds
	for _, k := range []string{"short", "far"} {
		if got := w.left(k, sent); got != 0 {
			t.Errorf("left(%q) = %d, want 0: not remembered", k, got)
		}
	}

	w.forget("a")
	if got := w.left("a", sent); got != 0 {
		t.Fatalf("after forget: left %d, want 0", got)
	}
}

// TestWindowsBounded: the table holds windowSlots entries whatever the
// number of keys, and a key that lost its place to another reads as unknown,
// not as the other's window, but for a tag that matches by chance: each
// lookup of a key not there matches one of its set's windowWays tags with a
// chance of windowWays in 2^24, 0.012 wrong windows expected here.
func TestWindowsBounded(t *testing.T) {
	w := newWindows()
	const n = 4 * windowSlots
	for i := range n {
		w.remember("k"+strconv.Itoa(i), 0, int64(100+i))
	}
	known, wrong := 0, 0
	for i := range n {
		switch left := w.left("k"+strconv.Itoa(i), 0); left {
		case 0:
		case int64(100 + i):
			known++
		default:
			wrong++
		}
	}
	if wrong > 2 {
		t.Fatalf("%d keys read another key's window", wrong)
	}
	// The table full (each key took the place of one whose window ends
	// first), but for a set that the hash gave fewer than windowWays keys
	// (one in 10,000) and a tag match that mistook a key.
	if known < windowSlots*99/100 || known > windowSlots {
		t.Fatalf("%d of %d keys remembered in %d slots (%d wrong)", known, n, windowSlots, wrong)
	}
}

// TestWindowsSets: keys that share a set keep their windows while the set
// has room, and a new key takes the place of the window that ends first.
func TestWindowsSets(t *testing.T) {
	w := newWindows()
	// windowWays+1 keys of one set.
	var keys []string
	first := maphash.String(w.seed, "s0") & (windowSlots/windowWays - 1)
	for i := 0; len(keys) <= windowWays; i++ {
		k := "s" + strconv.Itoa(i)
		if maphash.String(w.seed, k)&(windowSlots/windowWays-1) == first {
			keys = append(keys, k)
		}
	}
	for i, k := range keys[:windowWays] {
		w.remember(k, 0, int64(1000*(i+1))) // keys[0]'s window ends first
	}
	for i, k := range keys[:windowWays] {
		if got := w.left(k, 0); got != int64(1000*(i+1)) {
			t.Fatalf("%s: left %d, want %d: a set holds %d windows", k, got, 1000*(i+1), windowWays)
		}
	}
	w.remember(keys[windowWays], 0, 500)
	if got := w.left(keys[0], 0); got != 0 {
		t.Errorf("%s: left %d, want 0: its window, the first to end, gave its place", keys[0], got)
	}
	for i, k := range keys[1:] {
		want := int64(1000 * (i + 2))
		if k == keys[windowWays] {
			want = 500
		}
		if got := w.left(k, 0); got != want {
			t.Errorf("%s: left %d, want %d", k, got, want)
		}
	}
	// A key's own place is reused: no set holds a key twice.
	w.remember(keys[1], 0, 9000)
	w.forget(keys[1])
	if got := w.left(keys[1], 0); got != 0 {
		t.Errorf("%s: left %d after forget, want 0", keys[1], got)
	}
}
