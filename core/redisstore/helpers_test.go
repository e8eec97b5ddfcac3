package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ikeys "github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/redistest"
)

var ctx = context.Background()

// target is one Redis deployment under test, and one way to reach it: a
// Store, and a go-redis client that reads and shortens its keys.
type target struct {
	name  string
	store func(t testing.TB) (*Store, redis.UniversalClient)
}

var targets = []target{
	{"standalone", func(t testing.TB) (*Store, redis.UniversalClient) { c := redistest.Client(t); return New(c), c }},
	{"cluster", func(t testing.TB) (*Store, redis.UniversalClient) { c := redistest.ClusterClient(t); return New(c), c }},
	{"ring", func(t testing.TB) (*Store, redis.UniversalClient) { c := newRing(t); return New(c), c }},
	{"dial", func(t testing.TB) (*Store, redis.UniversalClient) {
		return dialStore(t, redistest.URL(t)), redistest.Client(t)
	}},
	{"dial_cluster", func(t testing.TB) (*Store, redis.UniversalClient) {
		return dialStore(t, redistest.ClusterURL(t)), redistest.ClusterClient(t)
	}},
	{"dial_sentinel", func(t testing.TB) (*Store, redis.UniversalClient) {
		return dialStore(t, redistest.SentinelURL(t)), redistest.SentinelClient(t)
	}},
}

// newRing returns a Ring over two private servers: keys are spread by hash
// tag, not by cluster slot.
func newRing(t testing.TB) redis.UniversalClient {
	redistest.URL(t) // same skip rule as the standalone tests
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	t.Cleanup(func() { _ = r.Close() })
	if err := r.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatalf("ring ping: %v", err)
	}
	return r
}

// forEachTarget runs f as one subtest per target; a subtest skips when its
// deployment's environment variable is unset.
func forEachTarget(t *testing.T, f func(t *testing.T, s *Store, c redis.UniversalClient)) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			s, c := tg.store(t)
			f(t, s, c)
		})
	}
}

// masters calls f with every master (the client itself when standalone).
func masters(c redis.UniversalClient, f func(c *redis.Client) error) error {
	switch c := c.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex // serialise f: callers collect into shared state
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return f(m)
		})
	case *redis.Ring:
		var mu sync.Mutex
		return c.ForEachShard(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return f(m)
		})
	case *redis.Client:
		return f(c)
	}
	panic("unexpected client type")
}

// keysUnder lists the keys starting with prefix on every master.
func keysUnder(t testing.TB, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	var keys []string
	err := masters(c, func(m *redis.Client) error {
		it := m.Scan(ctx, 0, ikeys.GlobEscape(prefix)+"*", 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		return it.Err()
	})
	if err != nil {
		t.Fatalf("scan %s*: %v", prefix, err)
	}
	return keys
}

// advance shortens the TTL of every key under prefix by d, deleting the keys
// whose TTL runs out: time passing, as far as the counters can tell. s, when
// not nil, is the Store under test: it forgets the windows it remembers
// (whose ends its clock, which did not move, would keep).
func advance(t testing.TB, s *Store, c redis.UniversalClient, prefix string, d time.Duration) {
	t.Helper()
	if s != nil {
		defer s.forgetWindows()
	}
	for _, k := range keysUnder(t, c, prefix) {
		// In milliseconds, as Redis keeps them: a token bucket's TTL may
		// pass the longest Duration (292 years), which PTTL's Duration
		// overflows into the negative, and the key was left as it was.
		ttl, err := c.Do(ctx, "PTTL", k).Int64()
		if err != nil {
			t.Fatalf("pttl %s: %v", k, err)
		}
		if ttl < 0 { // gone meanwhile, or no TTL (not ours to change)
			continue
		}
		if left := ttl - int64((d+time.Millisecond-1)/time.Millisecond); left < 1 {
			err = c.Del(ctx, k).Err()
		} else {
			err = c.Do(ctx, "PEXPIRE", k, left).Err()
		}
		if err != nil {
			t.Fatalf("advance %s: %v", k, err)
		}
	}
}

// dialStore returns a Store from Open on url, connected, closed at cleanup.
func dialStore(t testing.TB, url string) *Store {
	t.Helper()
	o, err := ParseURL(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	s, err := Open(ctx, Options{Client: o, RequireConnection: true})
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
