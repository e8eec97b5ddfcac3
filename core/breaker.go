package ratelimit

import (
	"sync"
	"time"
)

// breaker is a consecutive-failure circuit breaker. Closed: every call goes to
// the store. After threshold consecutive failures it opens: calls fail at once
// until the cooldown ends; then exactly one probe goes through (half-open); its
// success closes the breaker, its failure opens it again.
type breaker struct {
	threshold int // <0 disables
	cooldown  time.Duration

	mu       sync.Mutex
	failures int
	open     bool
	until    time.Time
	probing  bool
}

type breakerChange uint8

const (
	breakerSame breakerChange = iota
	breakerOpened
	breakerClosed
)

func (b *breaker) allow(now time.Time) bool {
	if b.threshold < 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return true
	}
	if b.probing || now.Before(b.until) {
		return false
	}
	b.probing = true
	return true
}

func (b *breaker) record(now time.Time, ok bool) breakerChange {
	if b.threshold < 0 {
		return breakerSame
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ok {
		b.failures = 0
		b.probing = false
		if b.open {
			b.open = false
			return breakerClosed
		}
		return breakerSame
	}
	b.failures++
	if b.open {
		// a failed probe: stay open for another cooldown
		b.probing = false
		b.until = now.Add(b.cooldown)
		return breakerSame
	}
	if b.failures >= b.threshold {
		b.open = true
		b.until = now.Add(b.cooldown)
		return breakerOpened
	}
	return breakerSame
}

// release ends a probe without a verdict.
func (b *breaker) release() {
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// State reports the breaker state: "closed", "open" or "half-open".
func (b *breaker) state(now time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.open:
		return "closed"
	case b.probing || !now.Before(b.until):
		return "half-open"
	}
	return "open"
}

// BreakerState reports the state of the limiter's circuit breaker:
// "closed", "open" or "half-open".
func (l *Limiter) BreakerState() string { return l.breaker.state(l.now()) }
