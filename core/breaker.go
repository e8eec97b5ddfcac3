package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
)

const (
	// DefaultBreakerFailures is the default of BreakerConfig.Failures.
	DefaultBreakerFailures = 3
	// DefaultBreakerCooldown is the default of BreakerConfig.Cooldown.
	DefaultBreakerCooldown = 500 * time.Millisecond
	// DefaultBreakerProbeTimeout is the default of BreakerConfig.ProbeTimeout:
	// the dial timeout of the Redis clients' defaults (rueidis, go-redis).
	DefaultBreakerProbeTimeout = 5 * time.Second
)

// ErrCircuitOpen is the error of results answered by an open circuit breaker.
var ErrCircuitOpen = errors.New("ratelimit: store circuit breaker open")

// breaker is a consecutive-failure circuit breaker. Closed: every call goes to
// the store. After threshold consecutive failures it opens: every check fails
// open at once, without touching the store, and a background prober (one
// goroutine per open breaker) tries the store with a deadline of its own, at
// growing intervals up to the cooldown; its first success closes the breaker.
// Checks never probe, so an outage costs them nothing once the breaker is
// open, and recovery does not wait for a caller's timeout or a full cooldown:
// the first success comes at most one cooldown (plus one probe) after the
// store returns.
//
// Every state is atomic: no lock, and no clock read on the check's path.
type breaker struct {
	threshold    int // <0 disables
	cooldown     time.Duration
	probeTimeout time.Duration

	open     atomic.Bool
	failures atomic.Int64
	probing  atomic.Bool  // a prober goroutine runs
	inProbe  atomic.Bool  // a probe is in flight: "half-open"
	asks     atomic.Int64 // checks answered while open; a prober stops when idle
	// probeOps are the ops of the check whose failure opened the breaker,
	// which the prober peeks: on a Redis Cluster whose node of those keys'
	// slots is down, a key of another slot answers, and a probe of it would
	// close the breaker at once, only for the next checks to pay the timeout
	// and open it again (the breaker flapping through a failover).
	probeOps atomic.Pointer[[]Op]
}

type breakerChange uint8

const (
	breakerSame breakerChange = iota
	breakerOpened
	breakerClosed
)

// proberIdle is how long a prober keeps probing without a check asking: a
// limiter that is no longer used leaves no goroutine behind for long, and the
// next check starts a new prober.
const proberIdle = time.Minute

// allow reports whether a check may call the store.
func (b *breaker) allow() bool {
	if b.threshold < 0 || !b.open.Load() {
		return true
	}
	b.asks.Add(1)
	return false
}

// steady reports that a success has nothing to change: the breaker is
// disabled, or closed with no failure counted. Small enough to inline, so
// that a check on a healthy store pays no call to record.
func (b *breaker) steady() bool {
	return b.threshold < 0 || (b.failures.Load() == 0 && !b.open.Load())
}

func (b *breaker) record(ok bool) breakerChange {
	if b.threshold < 0 {
		return breakerSame
	}
	if ok {
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		// A call from before the breaker opened came back well: so is the store.
		if b.open.Load() && b.open.CompareAndSwap(true, false) {
			return breakerClosed
		}
		return breakerSame
	}
	if n := b.failures.Add(1); n >= int64(b.threshold) && b.open.CompareAndSwap(false, true) {
		return breakerOpened
	}
	return breakerSame
}

// state reports the breaker state: "closed", "open" or "half-open".
func (b *breaker) state() string {
	switch {
	case !b.open.Load():
		return "closed"
	case b.inProbe.Load():
		return "half-open"
	}
	return "open"
}

// BreakerState reports the state of the limiter's circuit breaker: "closed",
// "open", or "half-open" while a background probe is in flight.
func (l *Limiter) BreakerState() string { return l.breaker.state() }

// ensureProber starts the background prober of an open breaker unless one runs.
func (l *Limiter) ensureProber() {
	if l.breaker.open.Load() && l.breaker.probing.CompareAndSwap(false, true) {
		go l.probeLoop()
	}
}

// probeLoop probes the store until a probe succeeds (closing the breaker),
// the breaker closes otherwise, or no check has asked for proberIdle.
func (l *Limiter) probeLoop() {
	defer l.breaker.probing.Store(false)
	interval := max(l.breaker.cooldown/4, 10*time.Millisecond)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	asks, idle := l.breaker.asks.Load(), time.Duration(0)
	for range timer.C {
		if !l.breaker.open.Load() {
			return
		}
		if l.probe() {
			if l.breaker.open.CompareAndSwap(true, false) {
				l.breaker.failures.Store(0)
				l.logger.LogAttrs(context.Background(), slog.LevelInfo, "rate_limit_breaker_closed", slog.String("limiter", l.name))
			}
			return
		}
		if n := l.breaker.asks.Load(); n != asks {
			asks, idle = n, 0
		} else if idle += interval; idle >= proberIdle {
			return
		}
		interval = min(2*interval, max(l.breaker.cooldown, 10*time.Millisecond))
		timer.Reset(interval)
	}
}

// probe peeks, under the probe timeout, the keys of the check that opened
// the breaker (or, when none is known, one key of the limiter's own with
// cost 0): a peek writes nothing on any store.
func (l *Limiter) probe() bool {
	l.breaker.inProbe.Store(true)
	defer l.breaker.inProbe.Store(false)
	ops := []Op{{Kind: OpCount, Key: l.prefix + "{" + l.name + ":probe}", Limit: 1, Period: time.Second}}
	if p := l.breaker.probeOps.Load(); p != nil {
		ops = *p
	}
	outs, err := callStoreWithin(l, l.breaker.probeTimeout, context.Background(), func(ctx context.Context) ([]OpResult, error) {
		return evalStore(ctx, l.store, ModePeek, ops)
	})
	return err == nil && len(outs) == len(ops)
}

// keepProbeOps keeps a copy of ops for the prober: the check's own are
// pooled, and the memory store's keys borrow a reused buffer.
func (b *breaker) keepProbeOps(ops []Op) {
	if len(ops) == 0 {
		return
	}
	kept := make([]Op, len(ops))
	for i, op := range ops {
		op.Key, op.BanKey, op.Member = strings.Clone(op.Key), strings.Clone(op.BanKey), strings.Clone(op.Member)
		kept[i] = op
	}
	b.probeOps.Store(&kept)
}
