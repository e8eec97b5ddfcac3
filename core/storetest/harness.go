// Package storetest is the conformance suite every ratelimit.Store must pass:
// the evaluation semantics of docs/design.md#the-model, run through a real Limiter
// against the store under test (memory, Redis, Redis Cluster).
package storetest

import (
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Harness is one store under test.
type Harness struct {
	// Store is the store under test.
	Store ratelimit.Store
	// Now is the limiter's clock; it must agree with the store's notion of
	// time (a fake clock shared with the memory store, time.Now for Redis).
	Now func() time.Time
	// Advance moves time forward by d for every key the suite created: the
	// memory store advances its fake clock; Redis shortens the TTL of every key
	// under Prefix by d, deleting those whose TTL runs out.
	Advance func(t testing.TB, d time.Duration)
	// Prefix is the counter key prefix the suite uses, unique to the test.
	Prefix string
	// TTLTolerance is how far a reported reset time may lag the expected one
	// (0 for a fake clock; network latency for Redis). The scenarios and
	// cases allow instead the real time one has taken so far when that is
	// longer (a loaded machine stalled between two steps): nothing it stored
	// can have aged more.
	TTLTolerance time.Duration

	start time.Time // real time the scenario or case began (see tolerance)
}

// NewHarness returns a fresh harness for one (sub)test.
type NewHarness func(t *testing.T) *Harness
