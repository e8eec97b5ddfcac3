package ratelimit

import (
	"testing"
	"time"
)

// TestClock: the real clock agrees with time.Now, never goes back, and takes
// a fresh base once the one it has is rebaseEvery old.
func TestClock(t *testing.T) {
	prev := now()
	for range 1000 {
		got, want := now(), time.Now()
		if d := got.Sub(want).Abs(); d > 5*time.Second { // Sub: monotonic readings (generous: a loaded machine may pause between the reads)
			t.Fatalf("now() = %v, time.Now() = %v", got, want)
		}
		if d := got.Round(0).Sub(want.Round(0)).Abs(); d > 5*time.Second { // Round(0): wall times
			t.Fatalf("now() wall = %v, time.Now() wall = %v", got.Round(0), want.Round(0))
		}
		if got.Before(prev) {
			t.Fatalf("now() went back: %v after %v", got, prev)
		}
		prev = got
	}

	old := time.Now().Add(-2 * rebaseEvery)
	clockBase.Store(&old)
	got := now()
	if b := clockBase.Load(); b == &old || got.Sub(*b) != 0 {
		t.Fatalf("a base %v old was kept (base now %v, time %v)", 2*rebaseEvery, *b, got)
	}
	if d := time.Since(got); d < 0 || d > 5*time.Second {
		t.Fatalf("after a rebase now() is %v from time.Now", d)
	}
}
