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
	part     int // on a store with parts, the part it serves (see parts)
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
// "open", or "half-open" while a background probe is in flight. On a store
// with parts (a Redis Cluster from redisstore.Dial: a breaker per master)
// it is the worst of the parts' states: "open" when the checks of one
// master fail open, though those of the others are still enforced.
func (l *Limiter) BreakerState() string {
	state := l.breaker.state()
	if l.parts == nil || state == "open" {
		return state
	}
	bs := l.parts.breakers.Load()
	if bs == nil {
		return state
	}
	for i := range bs {
		if b := bs[i].Load(); b != nil {
			switch b.state() {
			case "open":
				return "open"
			case "half-open":
				state = "half-open"
			}
		}
	}
	return state
}

// partitioned is implemented by a Store whose keys live on parts that fail
// on their own: a Redis Cluster's masters. The Limiter then keeps a breaker
// per part, so that a master that is down fails open only the checks with a
// key on it. A store outside this package implements it by its methods.
type partitioned interface {
	// Partition returns the part that holds key, in [0, maxParts), or -1
	// when the store has no parts or does not know key's (the Limiter's
	// own breaker then serves the key).
	Partition(key string) int
	// PartitionName names a part for the logs (a master's address), or "".
	PartitionName(part int) string
}

// maxParts bounds the breakers of a Limiter on a partitioned store: a
// Partition beyond it is served by the Limiter's own breaker.
const maxParts = 256

// parts are the per-part breakers of a Limiter on a partitioned store. A
// part's breaker is made at its first failure; nil is a closed breaker with
// no failure counted, and the array itself is made at the first failure of
// any part, so that a check pays no Partition call until a part has failed.
type parts struct {
	store    partitioned
	breakers atomic.Pointer[[maxParts]atomic.Pointer[breaker]]
}

// partSet is a set of parts: the distinct parts of a check's keys.
type partSet [maxParts / 64]uint64

func (s *partSet) add(p int) bool {
	w, bit := p/64, uint64(1)<<(p%64)
	if s[w]&bit != 0 {
		return false
	}
	s[w] |= bit
	return true
}

// partOf returns the part of key, or -1 for the Limiter's own breaker.
func (ps *parts) partOf(key string) int {
	if p := ps.store.Partition(key); p >= 0 && p < maxParts {
		return p
	}
	return -1
}

// get returns the breaker of part p, or nil when it has never failed.
func (ps *parts) get(p int) *breaker {
	if bs := ps.breakers.Load(); bs != nil {
		return bs[p].Load()
	}
	return nil
}

// make returns the breaker of part p, making it (a copy of l's settings)
// when it has none.
func (ps *parts) make(l *Limiter, p int) *breaker {
	bs := ps.breakers.Load()
	if bs == nil {
		ps.breakers.CompareAndSwap(nil, new([maxParts]atomic.Pointer[breaker]))
		bs = ps.breakers.Load()
	}
	if b := bs[p].Load(); b != nil {
		return b
	}
	bs[p].CompareAndSwap(nil, &breaker{threshold: l.breaker.threshold, cooldown: l.breaker.cooldown, part: p})
	return bs[p].Load()
}

// allow reports whether a check of ops may call the store: on a store with
// parts, when the breaker of each part of its keys is closed. A check with
// keys on a master that is down fails open whole, as its store call would
// (it waits for every master it needs), and at once.
func (l *Limiter) allow(ops []Op) bool {
	// Inlined: the usual check pays no call.
	return l.parts == nil && !l.breaker.open.Load() || l.allowParts(ops)
}

func (l *Limiter) allowParts(ops []Op) bool {
	if l.parts == nil || l.breaker.threshold < 0 {
		if l.breaker.allow() {
			return true
		}
		l.ensureProber(&l.breaker)
		return false
	}
	if l.parts.breakers.Load() == nil && !l.breaker.open.Load() {
		return true // no part has failed yet, and the limiter's own breaker is closed
	}
	own := false
	for i := range ops {
		b := &l.breaker
		if p := l.parts.partOf(ops[i].Key); p >= 0 {
			if b = l.parts.get(p); b == nil {
				continue
			}
		} else if own {
			continue
		} else {
			own = true
		}
		if !b.allow() {
			l.ensureProber(b)
			return false
		}
	}
	return true
}

// partsSteady reports that the success of a check of ops has nothing to
// change in the breakers of its parts. A caller asks l.breaker.steady()
// first, which inlines, and this only when l.parts is set: a check on a
// store without parts pays no call.
func (l *Limiter) partsSteady(ops []Op) bool {
	if l.parts.breakers.Load() == nil {
		return true // no part ever failed
	}
	for i := range ops {
		if p := l.parts.partOf(ops[i].Key); p >= 0 {
			if b := l.parts.get(p); b != nil && !b.steady() {
				return false
			}
		}
	}
	return true
}

// record counts the outcome of a store call of ops in the breaker, or on a
// store with parts in the breaker of each part of its keys, once per part:
// the error of a check whose keys span masters does not say which failed,
// so each counts it; a part opened so while its master answers closes at its
// prober's first probe, which peeks that part's keys only.
func (l *Limiter) record(ctx context.Context, err error, ops []Op) {
	if err != nil && ctx.Err() != nil {
		return // the caller gave up; that says nothing about the store
	}
	if l.parts == nil || l.breaker.threshold < 0 {
		l.recordIn(ctx, &l.breaker, err, ops)
		return
	}
	var seen partSet
	own := false
	for i := range ops {
		p := l.parts.partOf(ops[i].Key)
		switch {
		case p < 0 && !own:
			own = true
			l.recordIn(ctx, &l.breaker, err, ops)
		case p >= 0 && seen.add(p):
			b := l.parts.get(p)
			if b == nil {
				if err == nil {
					continue // never failed: nothing to reset
				}
				b = l.parts.make(l, p)
			}
			l.recordIn(ctx, b, err, ops)
		}
	}
}

// recordIn counts an outcome in b, logging its opening and closing.
func (l *Limiter) recordIn(ctx context.Context, b *breaker, err error, ops []Op) {
	switch b.record(err == nil) {
	case breakerOpened:
		b.keepProbeOps(l.partOps(b, ops))
		l.logger.LogAttrs(ctx, slog.LevelWarn, "rate_limit_breaker_open",
			l.breakerAttrs(b, slog.Duration("cooldown", b.cooldown), slog.Any("error", err))...)
		l.ensureProber(b)
	case breakerClosed:
		l.logger.LogAttrs(ctx, slog.LevelInfo, "rate_limit_breaker_closed", l.breakerAttrs(b)...)
	}
}

// partOps returns the ops of b's part: what its prober peeks.
func (l *Limiter) partOps(b *breaker, ops []Op) []Op {
	if l.parts == nil || b == &l.breaker {
		return ops
	}
	var own []Op
	for _, op := range ops {
		if l.parts.partOf(op.Key) == b.part {
			own = append(own, op)
		}
	}
	return own
}

// breakerAttrs are the attributes of b's log records: the limiter and, for
// a part's breaker, the part and its name (a master's address).
func (l *Limiter) breakerAttrs(b *breaker, more ...slog.Attr) []slog.Attr {
	attrs := []slog.Attr{slog.String("limiter", l.name)}
	if b != &l.breaker {
		attrs = append(attrs, slog.Int("part", b.part), slog.String("node", l.parts.store.PartitionName(b.part)))
	}
	return append(attrs, more...)
}

// ensureProber starts the background prober of an open breaker unless one runs.
func (l *Limiter) ensureProber(b *breaker) {
	if b.open.Load() && b.probing.CompareAndSwap(false, true) {
		go l.probeLoop(b)
	}
}

// probeLoop probes the store until a probe succeeds (closing b), b closes
// otherwise, or no check has asked for proberIdle.
func (l *Limiter) probeLoop(b *breaker) {
	defer b.probing.Store(false)
	interval := max(b.cooldown/4, 10*time.Millisecond)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	asks, idle := b.asks.Load(), time.Duration(0)
	for range timer.C {
		if !b.open.Load() {
			return
		}
		if l.probe(b) {
			if b.open.CompareAndSwap(true, false) {
				b.failures.Store(0)
				l.logger.LogAttrs(context.Background(), slog.LevelInfo, "rate_limit_breaker_closed", l.breakerAttrs(b)...)
			}
			return
		}
		if n := b.asks.Load(); n != asks {
			asks, idle = n, 0
		} else if idle += interval; idle >= proberIdle {
			return
		}
		interval = min(2*interval, max(b.cooldown, 10*time.Millisecond))
		timer.Reset(interval)
	}
}

// probe peeks, under the probe timeout, the keys of the check that opened
// b (of b's part only, on a store with parts) or, when none is known, one
// key of the limiter's own with cost 0: a peek writes nothing on any store.
func (l *Limiter) probe(b *breaker) bool {
	b.inProbe.Store(true)
	defer b.inProbe.Store(false)
	ops := []Op{{Kind: OpCount, Key: l.prefix + "{" + l.name + ":probe}", Limit: 1, Period: time.Second}}
	if p := b.probeOps.Load(); p != nil {
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
