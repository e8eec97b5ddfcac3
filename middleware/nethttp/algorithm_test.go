package ratelimithttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	ratelimithttp "github.com/ratekit/ratekit/middleware/nethttp"
)

// The headers follow a rule's algorithm: a token bucket tells the tokens
// left of its burst (not of its limit) and, once empty, the exact time its
// next token comes (not a window's end); a sliding window tells when the
// blocked request would pass. Served by a real server on loopback, on a
// simulated clock shared by the store, the limiter and the headers.
func TestHeadersFollowAlgorithm(t *testing.T) {
	start := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	now := start
	clock := func() time.Time { return now }
	tests := []struct {
		name string
		rule ratelimit.Rule
		// each request's status, RateLimit and Retry-After headers
		want [][3]string
	}{
		{"token bucket", ratelimit.Rule{Algorithm: ratelimit.TokenBucket, Limit: 2, Period: time.Minute, Burst: 1}, [][3]string{
			{"200", `"per_ip";r=0;t=30`, ""},
			{"429", `"per_ip";r=0;t=30`, "30"},
		}},
		{"token bucket burst over limit", ratelimit.Rule{Algorithm: ratelimit.TokenBucket, Limit: 2, Period: time.Minute, Burst: 3}, [][3]string{
			{"200", `"per_ip";r=2;t=30`, ""},
			{"200", `"per_ip";r=1;t=60`, ""},
			{"200", `"per_ip";r=0;t=90`, ""},
			{"429", `"per_ip";r=0;t=30`, "30"},
		}},
		{"sliding window", ratelimit.Rule{Algorithm: ratelimit.SlidingWindow, Limit: 2, Period: time.Minute}, [][3]string{
			{"200", `"per_ip";r=1;t=60`, ""},
			{"200", `"per_ip";r=0;t=60`, ""},
			{"429", `"per_ip";r=0;t=90`, "90"}, // half the window must slide out of the next one
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now = start
			r := tt.rule
			r.Name, r.Characteristics, r.Action = "per_ip", []string{"ip"}, ratelimit.ActionLimit
			l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: ratelimit.MemoryConfig{Now: clock}.New(), Now: clock, Rules: []ratelimit.Rule{r}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(ratelimithttp.Middleware(l, ratelimithttp.WithClock(clock))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
			defer srv.Close()
			for i, w := range tt.want {
				resp, err := http.Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				got := [3]string{resp.Status[:3], resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After")}
				if got != w {
					t.Fatalf("request %d: %q, want %q", i+1, got, w)
				}
				if p := resp.Header.Get("RateLimit-Policy"); p != `"per_ip";q=2;w=60` {
					t.Fatalf("request %d: policy %q", i+1, p)
				}
			}
		})
	}
}
