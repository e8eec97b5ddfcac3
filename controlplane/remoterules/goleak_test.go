package remoterules_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when goroutines outlive them: the client
// refreshes rules in the background, and every fetch must end with its
// deadline even when the rules service never answers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
