package ratelimithttp

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// The middleware builds its configuration, guard included, once: an option
// is applied when Middleware is called and never again per request, and the
// clock is read once per request.
func TestGuardBuiltOnce(t *testing.T) {
	l, err := ratelimit.New(ratelimit.Config{Name: "http", Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "per_ip", Characteristics: []string{"ip"},
			Limit: 1, Period: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	applied, reads := 0, 0
	counted := optionFunc(func(*config) { applied++ })
	clock := WithClock(func() time.Time { reads++; return now })
	h := Middleware(l, counted, clock)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	codes := []int{}
	for range 3 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	if !reflect.DeepEqual(codes, []int{200, 429, 429}) {
		t.Fatalf("statuses %v, want 200 then two 429s", codes)
	}
	if applied != 1 || reads != 3 {
		t.Fatalf("options applied %d times, clock read %d times for 3 requests; want 1 and 3", applied, reads)
	}
}
