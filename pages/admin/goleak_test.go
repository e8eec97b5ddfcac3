package admin_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when goroutines outlive them: the admin
// page's servers, its replicas' refresh loops and the headless browser's
// connections must all end with the test that started them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
