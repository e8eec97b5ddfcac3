package ratelimit

import (
	"errors"
	"time"
)

// The constants of the package, in one block; each type's documentation names
// its values.
const (
	// ActionLimit counts and blocks once the limit is exceeded. Terminal when it blocks.
	ActionLimit Action = "limit"
	// ActionLog counts like ActionLimit but never blocks (shadow mode). Never terminal.
	ActionLog Action = "log"
	// ActionSkip stops evaluation and allows the request without counting.
	ActionSkip Action = "skip"

	// ActionAllow is a Result's verdict: proceed.
	ActionAllow Verdict = "allow"
	// ActionBlock is a Result's verdict: reject (429, ResourceExhausted, retry the job later).
	ActionBlock Verdict = "block"

	// Enforce obeys the rules: an exceeded limit rule blocks. The default.
	Enforce Enforcement = 0
	// Shadow counts exactly as Enforce would (same keys, same bans, same
	// rules evaluated and skipped) but never blocks: Result.Action is always
	// ActionAllow, Result.Shadow is set and Result.WouldBlock tells the
	// verdict enforcement would have given.
	Shadow Enforcement = 1

	// ModeCheck counts: a Store charges every op.
	ModeCheck Mode = 0
	// ModePeek reads: a Store writes nothing.
	ModePeek Mode = 1

	// OpCount adds a (float) cost to a counter.
	OpCount OpKind = 0
	// OpDistinct adds a member to a set and counts its size.
	OpDistinct OpKind = 1
	// OpSliding adds a cost to a sliding window's estimate, unless that
	// would exceed the limit.
	OpSliding OpKind = 2
	// OpTokenBucket takes a cost's tokens from a bucket (GCRA), unless it
	// lacks them.
	OpTokenBucket OpKind = 3

	// EventCheck reports a Check.
	EventCheck EventKind = 0
	// EventPeek reports a Peek.
	EventPeek EventKind = 1
	// EventClear reports a Clear.
	EventClear EventKind = 2

	// Anonymous is the value of the "user" property for unauthenticated
	// callers. The angle brackets keep it from colliding with any real user name.
	Anonymous = "<anonymous>"
	// PropertyMethod is the identifier property of the HTTP method
	// (identifiers.Method). A Match entry on it that accepts "GET" also
	// accepts "HEAD": HTTP servers, Go's ServeMux among them, answer HEAD with
	// the GET handler, so a rule that limits GET must count HEAD too or it
	// could be walked past. A matcher that accepts "HEAD" itself is unchanged.
	PropertyMethod = "method"
	// DefaultKeyPrefix starts every counter key unless Config.KeyPrefix is set.
	DefaultKeyPrefix = "ratekit:rl:"

	// DefaultTimeout is the default of Config.Timeout.
	DefaultTimeout = 100 * time.Millisecond
	// DefaultBreakerFailures is the default of BreakerConfig.Failures.
	DefaultBreakerFailures = 3
	// DefaultBreakerCooldown is the default of BreakerConfig.Cooldown.
	DefaultBreakerCooldown = 500 * time.Millisecond
	// DefaultBlockedCacheSize is the default of BlockedCacheConfig.Size.
	DefaultBlockedCacheSize = 10000
	// DefaultBlockedCacheMaxAge is the default of BlockedCacheConfig.MaxAge.
	DefaultBlockedCacheMaxAge = time.Second
)

// The errors of results that failed open.
var (
	// ErrCircuitOpen is the error of results answered by an open circuit breaker.
	ErrCircuitOpen = errors.New("ratelimit: store circuit breaker open")

	// ErrCanceled is the error of results whose caller's context ended before the
	// store answered (the client went away). It is logged at no level and counted
	// as no store error: it says nothing about the store's health.
	ErrCanceled = errors.New("ratelimit: check canceled by the caller")

	// ErrStorePanic wraps a panic raised inside a Store: the check fails open with
	// it instead of crashing the caller.
	ErrStorePanic = errors.New("ratelimit: store panicked")
)
