package ratelimit

import (
	"sync/atomic"
	"time"
)

// now is the real clock of Limiters and MemoryStores, cheaper than time.Now:
// time.Now reads two clocks (the wall clock and the monotonic one), which on
// some virtual machines costs a tenth of an in-memory check, while the time
// elapsed since a recent time.Now needs the monotonic clock alone. The wall
// time it returns is that base's plus the elapsed monotonic time, and the base
// is read again once it is rebaseEvery old, so it strays from time.Now only by
// the steps the wall clock took since (an NTP correction): never by more than
// what the wall clock moved within that interval. Its monotonic reading is
// exact, and durations and expiries use it.
func now() time.Time {
	b := clockBase.Load()
	d := time.Since(*b) // monotonic clock only: b has a monotonic reading
	if d < 0 || d >= rebaseEvery {
		t := time.Now()
		clockBase.Store(&t)
		return t
	}
	return b.Add(d)
}

const rebaseEvery = time.Second

var clockBase atomic.Pointer[time.Time]

func init() {
	t := time.Now()
	clockBase.Store(&t)
}
