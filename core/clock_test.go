package ratelimit

import (
	"testing"
	"time"
)

// TestClock: the real clock agrees with time.Now, never goes back, and takes
// a fresh base once the one it has is rebaseEvery old. Each reading is
// bracketed by time.Now readings taken before and after it, so that no bound
// depends on how long the machine pauses between the reads.
func TestClock(t *testing.T) {
	prev := now()
	for range 1000 {
		before := time.Now()
		got := now()
		after := time.Now()
		if got.Before(before) || got.After(after) { // monotonic readings: exact
			t.Fatalf("now() = %v, not between time.Now() readings %v and %v", got, before, after)
		}
		// Wall times: now() strays from time.Now only by the steps the wall
		// clock took since its base (at most rebaseEvery old), never by a pause.
		const steps = 5 * time.Second
		if w := got.Round(0); w.Before(before.Round(0).Add(-steps)) || w.After(after.Round(0).Add(steps)) {
			t.Fatalf("now() wall = %v, time.Now() walls %v and %v", w, before.Round(0), after.Round(0))
		}
		if got.Before(prev) {
			t.Fatalf("now() went back: %v after %v", got, prev)
		}
		prev = got
	}

	old := time.Now().Add(-2 * rebaseEvery)
	clockBase.Store(&old)
	before := time.Now()
	got := now()
	after := time.Now()
	if b := clockBase.Load(); b == &old || got.Sub(*b) != 0 {
		t.Fatalf("a base %v old was kept (base now %v, time %v)", 2*rebaseEvery, *b, got)
	}
	if got.Before(before) || got.After(after) {
		t.Fatalf("after a rebase now() is %v, not between time.Now() readings %v and %v", got, before, after)
	}
}
