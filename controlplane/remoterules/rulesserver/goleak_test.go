package rulesserver_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when goroutines outlive them: the rules
// service's gRPC and HTTP servers and its rule store refresh in the
// background, and a stopped server must leave nothing behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
