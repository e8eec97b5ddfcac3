package admin_test

import (
	"net/http"
	"testing"
)

func TestPageRendersTiers(t *testing.T) {
	f := newFixture(t, nil)
	b := newBrowser(t, f)
	code, body := b.get("?limiter=api")
	if code != http.StatusOK {
		t.Fatalf("status %d\n%s", code, body)
	}
	t.Log(body)
}
