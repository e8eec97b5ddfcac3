package rulestore

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// The store's own keys (Prefix+"@index", "@orphans", "@rev") written by hand
// or by a foreign tool, with values no reader should receive.

// countingClient returns a client of the standalone test server that counts
// the bytes it receives, to prove what a read never receives.
func countingClient(t *testing.T) (*redis.Client, *atomic.Int64) {
	t.Helper()
	opt, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	received := new(atomic.Int64)
	d := &net.Dialer{Timeout: 5 * time.Second}
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: conn, n: received}, nil
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c, received
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Revision never receives a counter longer than an int64's digits: one of a
// megabyte (hand-written; a valid integer, with its leading zeros) was
// received whole and read as 7, where every write counts it as no integer
// and starts again from 0. It is refused by its size, naming the key.
func TestRevisionIsReadBounded(t *testing.T) {
	c, received := countingClient(t)
	s := newStore(t, c, Options{})
	if err := c.Set(ctx, s.revKey(), strings.Repeat("0", 1<<20)+"7", 0).Err(); err != nil {
		t.Fatal(err)
	}
	received.Store(0)
	rev, err := s.Revision(ctx)
	if n := received.Load(); n > 4096 {
		t.Fatalf("Revision received %d bytes", n)
	}
	if err == nil || !strings.Contains(err.Error(), s.revKey()) || !strings.Contains(err.Error(), "1048577 bytes") || len(err.Error()) > 1024 {
		t.Fatalf("Revision = %d, %.300v; want an error naming the key and its size", rev, err)
	}
	if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("a", 1)}})); err != nil {
		t.Fatal(err)
	}
	if rev, err := s.Revision(ctx); err != nil || rev != 1 {
		t.Fatalf("Revision after a write = %d, %v; want 1 (the write starts it again)", rev, err)
	}
}

// List never receives an orphan mark longer than a time in ms: one of a
// megabyte (hand-written, digits) was received whole and read as a time,
// where GC counts it as no mark and marks the orphan again. List reads it
// as no mark, as GC does.
func TestOrphanMarksAreReadBounded(t *testing.T) {
	c, received := countingClient(t)
	s := newStore(t, c, Options{GCGrace: time.Hour})
	seedAll(t, s, "gone")
	if err := c.HSet(ctx, s.orphansKey(), "gone", strings.Repeat("0", 1<<20)+"1700000000000").Err(); err != nil {
		t.Fatal(err)
	}
	received.Store(0)
	entries, err := s.List(ctx)
	if n := received.Load(); n > 64<<10 {
		t.Fatalf("List received %d bytes", n)
	}
	if err != nil || len(entries) != 1 || !entries[0].OrphanSince.IsZero() {
		t.Fatalf("List: %+v, %v; want gone listed without a mark", entries, err)
	}
	rep, err := s.GC(ctx, available(t))
	if err != nil || !slices.Equal(rep.Marked, []string{"gone"}) {
		t.Fatalf("GC: %+v, %v; want gone marked again", rep, err)
	}
}
