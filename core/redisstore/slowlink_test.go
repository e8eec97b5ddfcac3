package redisstore

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestDialReconnectsWhenTheHandshakeOutlastsChecks: a link on which a
// connection takes longer to set up than a check may wait (a handshake of
// several round trips to a distant Redis) must still get its connection
// back after it drops. Connection attempts are bounded by the deadlines of
// the calls waiting for them (attempts.go); once the breaker is open the
// only caller is its prober, so it is the prober's deadline, not the
// check's, that lets the attempt finish. Before, every attempt was given up
// at the check timeout, and the limiter failed open for good.
func TestDialReconnectsWhenTheHandshakeOutlastsChecks(t *testing.T) {
	srv := redistest.StartServer(t)
	o, err := ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 100 * time.Millisecond
	var slow atomic.Bool // dials take four check timeouts once set
	o.DialCtxFn = func(ctx context.Context, addr string, nd *net.Dialer, _ *tls.Config) (net.Conn, error) {
		if slow.Load() {
			select {
			case <-time.After(4 * timeout):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return nd.DialContext(ctx, "tcp", addr)
	}
	s, err := Open(ctx, Options{Client: o, RequireConnection: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	l, err := ratelimit.New(ratelimit.Config{
		Name:      "slowlink",
		Store:     s,
		KeyPrefix: redistest.Prefix(t),
		Rules: []ratelimit.Rule{{Name: "per_user", Action: ratelimit.ActionLimit, Characteristics: []string{"user"},
			Limit: 1 << 40, Period: time.Hour}},
		Timeout: timeout,
		Breaker: ratelimit.BreakerConfig{Failures: 3, Cooldown: 100 * time.Millisecond},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func() error { return l.Check(ctx, ratelimit.Identifier{"user": "alice"}).Err }
	waitFor(t, "a check succeeds", func() bool { return check() == nil })

	// The link slows and the connection drops: every connection attempt from
	// now on takes 400ms before its handshake even starts.
	slow.Store(true)
	kill := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer func() { _ = kill.Close() }()
	if err := kill.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a check succeeds on the slow link", func() bool {
		time.Sleep(10 * time.Millisecond) // checks keep coming, as requests do
		return check() == nil
	})
}
