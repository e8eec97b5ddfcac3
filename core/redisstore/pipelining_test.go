package redisstore

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// writeCounter counts the writes on a connection.
type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c writeCounter) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

// TestDialBatchesConcurrentChecks: the checks of 64 callers at once share
// the writes of a Store from Dial (its pause before each write, see Open),
// where rueidis' own default writes nearly one per check.
func TestDialBatchesConcurrentChecks(t *testing.T) {
	o, err := ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	o.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{c, &writes}, nil
	}
	s, err := Open(ctx, Options{Client: o, RequireConnection: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l := allocsLimiter(t, s, 1)
	id := ratelimit.Identifier{"user": "u"}
	check := func() {
		if r := l.Check(ctx, id); r.Err != nil || !r.Matched {
			t.Errorf("check: %+v", r)
		}
	}

	const callers, checks = 64, 100
	run := func() {
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for range checks {
					check()
				}
			})
		}
		wg.Wait()
	}
	run() // rueidis dialled its connections and started its writers
	before := writes.Load()
	run()
	perCheck := float64(writes.Load()-before) / (callers * checks)
	t.Logf("64 callers: %.3f writes per check", perCheck)
	if perCheck > 0.5 {
		t.Errorf("64 callers: %.3f writes per check, want at most 0.5", perCheck)
	}
}
