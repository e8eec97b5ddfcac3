package adaptertest

import (
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// testShadowMode: a limiter in shadow mode (a rollout beside a legacy check)
// lets every request through with no rate-limit header, yet counts; switched
// to enforce at runtime it blocks at once on what it counted.
func testShadowMode(s *suite) {
	l := s.limiter("http", perIP("per_ip", 2, time.Minute))
	if err := l.SetEnforcement(ratelimit.Shadow); err != nil {
		s.t.Fatal(err)
	}
	srv := s.serve(Setup{Limiters: []*ratelimit.Limiter{l}})
	for i := 0; i < 4; i++ {
		r := s.do(srv, "GET", "/hello")
		s.allowed(r, "hello")
		s.noHeader(r, rateLimitHeaders...)
	}
	if n := s.calls["/hello"].Load(); n != 4 {
		s.t.Errorf("handler ran %d times in shadow mode, want 4", n)
	}
	if c := s.count(l); c <= 2 {
		s.t.Errorf("count after 4 shadow requests = %v, want over the limit of 2", c)
	}
	if err := l.SetEnforcement(ratelimit.Enforce); err != nil {
		s.t.Fatal(err)
	}
	s.blocked(s.do(srv, "GET", "/hello"), 60, "per_ip")
}
