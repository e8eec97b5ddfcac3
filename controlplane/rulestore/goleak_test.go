package rulestore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when goroutines outlive them: the replica
// refreshes in a goroutine of its own (Start) and the publisher talks to Redis;
// both must be gone once their context is done.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
