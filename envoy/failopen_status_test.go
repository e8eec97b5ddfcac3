package ratekitenvoy_test

import (
	"net"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
	"github.com/ratekit/ratekit/internal/redistest"
)

// blackHole is a Redis address that accepts connections and never answers.
func blackHole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return l.Addr().String()
}

// A descriptor that failed open counted nothing, so its status says nothing
// about a limit: no current_limit, no limit_remaining, no
// duration_until_reset, on the wire or in JSON, and no rate-limit headers. A
// gateway must never read an outage as "0 remaining".
func TestFailOpenStatusCarriesNoLimit(t *testing.T) {
	srv := redistest.StartServer(t)
	// The check timeout: a stopped Redis refuses at once, and the request
	// before its outage must succeed, which a short timeout would fail on a
	// loaded machine; against the black hole every check must time out.
	tests := []struct {
		name    string
		addr    string
		outage  func()
		timeout time.Duration
	}{
		{"stopped", srv.Addr, srv.Stop, 10 * time.Second},
		{"unreachable", blackHole(t), func() {}, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: tt.addr, MaxRetries: -1})
			t.Cleanup(func() { _ = client.Close() })
			l := newLimiter(t, redisstore.New(client), redistest.Prefix(t), nil, func(c *ratelimit.Config) {
				c.Timeout = tt.timeout
				c.Breaker = ratelimit.BreakerConfig{Failures: -1} // every request reaches the broken store
			})
			g := startGateway(t, l, nil, ratekitenvoy.Options{})
			plain := desc("remote_address", "10.0.0.5")
			if tt.name == "stopped" {
				// Before the outage the status carries the limit.
				wantStatus(t, g.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{plain}}).GetStatuses()[0], ok, "per_ip", 5, 4)
			}
			tt.outage()
			override := desc("remote_address", "10.0.0.6")
			override.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{plain, override}}
			for i := range 2 {
				resp := g.ask(t, req)
				if resp.GetOverallCode() != ok || len(resp.GetStatuses()) != 2 {
					t.Fatalf("request %d: %v", i, resp)
				}
				for j, st := range resp.GetStatuses() {
					if !proto.Equal(st, &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}) {
						t.Errorf("request %d, descriptor %d failed open but reports a limit: %v", i, j, st)
					}
					js := protojson.Format(st)
					if strings.Contains(js, "limitRemaining") || strings.Contains(js, "currentLimit") || strings.Contains(js, "durationUntilReset") {
						t.Errorf("request %d, descriptor %d: JSON %s", i, j, js)
					}
				}
				for _, h := range resp.GetResponseHeadersToAdd() {
					if strings.HasPrefix(strings.ToLower(h.GetKey()), "ratelimit") {
						t.Errorf("request %d: header %s: %s during the outage", i, h.GetKey(), h.GetValue())
					}
				}
			}
		})
	}
}
