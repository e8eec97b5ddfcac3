package redistest

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts what a client sends: one per
// command or pipeline it processes, which is one network round trip (per node,
// for node clients of a cluster). With Record set it also keeps their names.
type RoundTrips struct {
	N      atomic.Int64
	Record bool
	mu     sync.Mutex
	trips  []string
}

var _ redis.Hook = (*RoundTrips)(nil)

// DialHook implements redis.Hook.
func (h *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.N.Add(1)
		if h.Record {
			h.add(cmd.Name())
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.N.Add(1)
		if h.Record {
			names := make([]string, len(cmds))
			for i, c := range cmds {
				names[i] = c.Name()
			}
			h.add("pipeline[" + strings.Join(names, ",") + "]")
		}
		return next(ctx, cmds)
	}
}

func (h *RoundTrips) add(s string) {
	h.mu.Lock()
	h.trips = append(h.trips, s)
	h.mu.Unlock()
}

// Take returns the trips recorded since the last Take.
func (h *RoundTrips) Take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.trips
	h.trips = nil
	return t
}

// CountingClient returns a client of the standalone test server (URL) that
// adds to read every byte it receives from Redis: proof of what a bounded
// read never receives.
func CountingClient(t testing.TB, read *atomic.Int64) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(URL(t))
	if err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, n: read}, nil
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// countingConn counts the bytes read from its connection.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}
