package ratekitenvoy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekit/ratekit/core/redisstore"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
	"github.com/ratekit/ratekit/internal/redistest"
)

// dialURLs are the deployments a Store from redisstore.Dial is tested on.
var dialURLs = []struct {
	name string
	url  func(testing.TB) string
}{
	{"standalone", redistest.URL},
	{"cluster", redistest.ClusterURL},
}

// A request's descriptors answer as if each were sent alone on the store
// that ratekit-envoy runs on: redisstore.Dial's, on Redis and on a Cluster.
func TestDescriptorsInOneRequestEqualSingleRequestsDial(t *testing.T) {
	for _, d := range dialURLs {
		t.Run(d.name, func(t *testing.T) {
			gw := func() *gateway {
				store := checkWrites{}.open(t, d.url(t))
				return startGateway(t, newLimiter(t, store, redistest.Prefix(t), nil), nil, ratekitenvoy.Options{})
			}
			compareBatchedWithSingles(t, gw(), gw(), 2*time.Second)
		})
	}
}

// A request of five descriptors is one round trip to Redis: one write that
// carries check commands, counted on the store's connections. On a Cluster
// it is one round trip per stage, each to every node involved at once: two
// of the descriptors (#1 and #4) match two limit rules, whose counters live
// in different slots, so their checks take two stages, and the request at
// most two writes per node (one by one, the five checks would take seven
// round trips).
func TestFiveDescriptorsOneRoundTrip(t *testing.T) {
	for _, d := range dialURLs {
		t.Run(d.name, func(t *testing.T) {
			cw := checkWrites{writes: map[string]int{}, mu: new(sync.Mutex)}
			store := cw.open(t, d.url(t))
			gw := startGateway(t, newLimiter(t, store, redistest.Prefix(t), nil), nil, ratekitenvoy.Options{})
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: batchDescriptors()}
			for round := range 3 {
				cw.take()
				resp := gw.ask(t, req)
				if len(resp.GetStatuses()) != 5 || resp.GetStatuses()[0].GetCurrentLimit() == nil {
					t.Fatalf("round %d: answer %v, want 5 statuses with limits", round, resp)
				}
				per := cw.take()
				total := 0
				for addr, n := range per {
					total += n
					if n > 2 {
						t.Errorf("round %d: %d writes with checks to %s, want at most 2 (two stages)", round, n, addr)
					}
				}
				if total == 0 || d.name == "standalone" && total != 1 {
					t.Errorf("round %d: %d writes with checks (%v), want 1 on one server", round, total, per)
				}
			}
		})
	}
}

// checkWrites counts, per server address, the writes on a Store's
// connections that carry a check's commands (INCRBY or a script call):
// rueidis writes the commands of one round trip to a server at once, and
// its own pings and handshakes carry neither.
type checkWrites struct {
	mu     *sync.Mutex
	writes map[string]int
}

// open returns a Store from redisstore.Open on url whose connections cw
// counts (when it has a map), closed at cleanup.
func (cw checkWrites) open(t testing.TB, url string) *redisstore.Store {
	t.Helper()
	o, err := redisstore.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	if cw.writes != nil {
		o.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return countedConn{c, addr, cw}, nil
		}
	}
	s, err := redisstore.Open(context.Background(), redisstore.Options{Client: o, RequireConnection: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// take returns the counts since the last take.
func (cw checkWrites) take() map[string]int {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	out := map[string]int{}
	for a, n := range cw.writes {
		out[a] = n
		delete(cw.writes, a)
	}
	return out
}

type countedConn struct {
	net.Conn
	addr string
	cw   checkWrites
}

var checkCommands = [][]byte{[]byte("INCRBY"), []byte("EVALSHA"), []byte("EVAL\r\n")}

func (c countedConn) Write(b []byte) (int, error) {
	for _, cmd := range checkCommands {
		if bytes.Contains(b, cmd) {
			c.cw.mu.Lock()
			c.cw.writes[c.addr]++
			c.cw.mu.Unlock()
			break
		}
	}
	return c.Conn.Write(b)
}
