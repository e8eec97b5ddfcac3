package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// CheckCosts returns an error naming the first op of a NaN or infinite
// cost, which every Store refuses before writing anything (see Store.Eval):
// added to a counter, +Inf would read over every limit until the window
// ended. A Limiter never sends one (its check fails open first); a Store
// calls it on the ops it is given directly.
func CheckCosts(ops []Op) error {
	for i := range ops {
		if c := ops[i].Cost; math.IsNaN(c) || math.IsInf(c, 0) {
			return fmt.Errorf("op %d (%s): invalid cost %v", i, ops[i].Key, c)
		}
	}
	return nil
}

// Store keeps counters, distinct-value sets and bans. The Limiter decides which
// rules apply and builds their keys; a Store only applies a check's operations,
// in order, with the semantics below. Implementations: NewMemoryStore (in this
// package) and redisstore's (Dial, New). Every Store must pass core/storetest.
type Store interface {
	// Eval applies ops in order and returns one OpResult per op.
	//
	// In ModeCheck each op is charged: a counter op adds Cost to its counter
	// (starting a window of Period at the first write; the window is never
	// extended), a distinct op adds Member to its set; Cost 0 writes nothing.
	// An op whose BanKey holds an active ban is exceeded and not charged. An
	// op that becomes exceeded (count > Limit) and has BanFor > 0 starts a ban.
	// After an exceeded op with Terminal set, no later op is evaluated.
	// A count of MaxCount + 1 (2^53) or more is reported as MaxCount + 1.
	// An op whose Cost is NaN or infinite fails the call with an error
	// before anything is written.
	//
	// In ModePeek nothing is written; an op is exceeded when it is banned or when
	// the count a check would reach (count + Cost, or the set size with Member
	// added) exceeds Limit.
	//
	// OpSliding and OpTokenBucket ops count by their algorithm
	// (docs/design.md#algorithms): they are charged only when not exceeded,
	// their Count is the estimate (sliding) or the tokens in use (bucket),
	// and an exceeded op's TTL is the time until the same op would pass, or
	// for a cost that never does (over Limit, over Burst) until the window is
	// empty or the bucket full (0 if it already is).
	Eval(ctx context.Context, mode Mode, ops []Op) ([]OpResult, error)

	// Delete removes the given keys and returns how many existed.
	Delete(ctx context.Context, keys []string) (int, error)
}

// contextBounded is implemented by a Store that returns by its context's
// deadline on its own, whatever the network does (for go-redis: a client with
// ContextTimeoutEnabled), by reporting true from ContextBounded. The Limiter
// then calls it directly instead of guarding each call with a goroutine, which
// saves allocations per check. Such a store must not use the context of a
// call after the call returned (nor keep it): the Limiter may reuse it for a
// later call. A store outside this package implements it by its method alone.
type contextBounded interface {
	ContextBounded() bool
}

// Mode selects between counting (ModeCheck) and reading (ModePeek).
type Mode uint8

const (
	// ModeCheck counts: a Store charges every op.
	ModeCheck Mode = 0
	// ModePeek reads: a Store writes nothing.
	ModePeek Mode = 1
)

func (m Mode) String() string {
	if m == ModePeek {
		return "peek"
	}
	return "check"
}

// OpKind selects what an Op counts.
type OpKind uint8

const (
	// OpCount adds a (float) cost to a counter.
	OpCount OpKind = 0
	// OpDistinct adds a member to a set and counts its size.
	OpDistinct OpKind = 1
	// OpSliding adds a cost to a sliding window's estimate, unless that
	// would exceed the limit (and the op is not Spent).
	OpSliding OpKind = 2
	// OpTokenBucket takes a cost's tokens from a bucket (GCRA), unless it
	// lacks them (and the op is not Spent).
	OpTokenBucket OpKind = 3
)

// Op is one counting rule's work within a check.
type Op struct {
	Kind     OpKind
	Key      string        // counter or set key
	BanKey   string        // ban key, or "" when the rule has no ban
	Member   string        // OpDistinct: the value to add
	Cost     float64       // OpCount: amount to add; 0 reads only; at most MaxCount + 1 from a Limiter
	Limit    int64         // exceeded when count > Limit; at most MaxCount from a Limiter
	Period   time.Duration // window length, set on the first write
	BanFor   time.Duration // ban length once exceeded; 0 for none
	Terminal bool          // an exceeded Terminal op stops the evaluation (ActionLimit)
	Burst    int64         // OpTokenBucket: the bucket's capacity (>= 1)
	// Spent (OpSliding, OpTokenBucket; a check, not a peek): the cost was
	// already spent, so the op charges it even when that takes the count
	// past the limit (a debt the later ops see), where it otherwise charges
	// only an op that passes. Its outcome is reported as without it, but
	// for the count, which includes the cost.
	Spent bool
}

// OpResult is what a Store reports for one Op.
type OpResult struct {
	// Evaluated is false for ops after a terminal exceeded op.
	Evaluated bool
	// Count is the counter value (or set size) after the op.
	Count float64
	// TTL is the time until the window ends or, when Banned, until the ban ends.
	// For a key that does not exist it is the op's Period.
	TTL time.Duration
	// Banned reports an active ban (found, or started by this op).
	Banned bool
	// Exceeded reports count > Limit, or an active ban.
	Exceeded bool
}

// ErrStorePanic wraps a panic raised inside a Store: the check fails open with
// it instead of crashing the caller. A panic with an error value is wrapped
// too, so that errors.Is finds it.
var ErrStorePanic = errors.New("ratelimit: store panicked")

// recoverStore turns a panic in a store call into an error. Deferred by every
// store call of the Limiter (and by the memory store itself), so that a bug in
// a store costs one fail-open result, never the process.
func recoverStore(err *error) {
	if p := recover(); p != nil {
		if e, ok := p.(error); ok {
			*err = fmt.Errorf("%w: %w", ErrStorePanic, e)
			return
		}
		*err = fmt.Errorf("%w: %v", ErrStorePanic, p)
	}
}
