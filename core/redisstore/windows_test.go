package redisstore

import (
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
// number of keys, and a key that lost its slot to another reads as unknown,
// never as the other's window.
func TestWindowsBounded(t *testing.T) {
	w := newWindows()
	const n = 4 * windowSlots
	for i := range n {
		w.remember("k"+strconv.Itoa(i), 0, int64(100+i))
	}
	known := 0
	for i := range n {
		switch left := w.left("k"+strconv.Itoa(i), 0); left {
		case 0:
		case int64(100 + i):
			known++
		default:
			t.Fatalf("k%d: left %d, another key's window", i, left)
		}
	}
	if known > windowSlots || known < windowSlots/2 {
		t.Fatalf("%d of %d keys remembered in %d slots", known, n, windowSlots)
	}
}
