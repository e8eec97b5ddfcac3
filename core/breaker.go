package ratelimit

import (
	"sync"
	"sync/atomic"
	"time"
)

// breaker is a consecutive-failure circuit breaker. Closed: every call goes to
// the store. After threshold consecutive failures it opens: calls fail at once
// until the cooldown ends; then exactly one probe goes through (half-open); its
// success closes the breaker, its failure opens it again.
//
// The closed state, every healthy check's path, takes no lock and reads no
// clock: an atomic flag and a failure count that is written only when it
// changes. The mutex guards the open state's cooldown and probe.
type breaker struct {
	threshold int // <0 disables
	cooldown  time.Duration

	open     atomic.Bool
	failures atomic.Int64

	mu      sync.Mutex
	until   time.Time // open: when the next probe may go
	probing bool      // open: a probe is in flight
}

type breakerChange uint8

const (
	breakerSame breakerChange = iota
	breakerOpened
	breakerClosed
)

func (b *breaker) allow(now func() time.Time) bool {
	if b.threshold < 0 || !b.open.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return true
	}
	if b.probing || now().Before(b.until) {
		return false
	}
	b.probing = true
	return true
}

func (b *breaker) record(now func() time.Time, ok bool) breakerChange {
	if b.threshold < 0 {
		return breakerSame
	}
	if ok {
		if !b.open.Load() {
			if b.failures.Load() != 0 {
				b.failures.Store(0)
			}
			return breakerSame
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		b.failures.Store(0)
		b.probing = false
		if b.open.Load() {
			b.open.Store(false)
			return breakerClosed
		}
		return breakerSame
	}
	n := b.failures.Add(1)
	if !b.open.Load() && n < int64(b.threshold) {
		return breakerSame
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open.Load() {
		// a failed probe (or a call from before the opening): another cooldown
		b.probing = false
		b.until = now().Add(b.cooldown)
		return breakerSame
	}
	b.until = now().Add(b.cooldown)
	b.open.Store(true)
	return breakerOpened
}

// release ends a probe without a verdict.
func (b *breaker) release() {
	if !b.open.Load() {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// state reports the breaker state: "closed", "open" or "half-open".
func (b *breaker) state(now time.Time) string {
	if !b.open.Load() {
		return "closed"
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.open.Load():
		return "closed"
	case b.probing || !now.Before(b.until):
		return "half-open"
	}
	return "open"
}

// BreakerState reports the state of the limiter's circuit breaker:
// "closed", "open" or "half-open".
func (l *Limiter) BreakerState() string { return l.breaker.state(l.now()) }
