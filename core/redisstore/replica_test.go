package redisstore

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// nameProxy stands in for a DNS name that a failover moves (a managed
// Redis' primary endpoint): a loopback listener that forwards each new
// connection to the backend of the moment. Connections already made stay
// with their server, as they do when a DNS record changes.
type nameProxy struct {
	ln      net.Listener
	backend atomic.Value // string: host:port
	dials   atomic.Int64 // connections accepted
	mu      sync.Mutex
	conns   []net.Conn
	wg      sync.WaitGroup
}

func startNameProxy(t *testing.T, backend string) *nameProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &nameProxy{ln: ln}
	p.backend.Store(backend)
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.dials.Add(1)
			b, err := net.Dial("tcp", p.backend.Load().(string))
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, b)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(b, c); _ = b.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, b); _ = c.Close() })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// TestDialRecoversFromMasterTurnedReplica: a standalone server that became a
// replica answers the store's writes READONLY; the store dials the name
// again and goes on with the new master behind it. While the name still
// leads to the replica, calls fail with ErrReplica, peeks too: a probe the
// replica answered closed the Limiter's breaker, and it flapped. Before,
// rueidis kept the connection and every check failed until a restart, while
// peeks succeeded.
func TestDialRecoversFromMasterTurnedReplica(t *testing.T) {
	oldMaster, newMaster := redistest.StartServer(t), redistest.StartServer(t)
	proxy := startNameProxy(t, oldMaster.Addr)
	s := dialStore(t, "redis://"+proxy.ln.Addr().String())
	k := newKeyer(t)
	op := k.count("a", 1<<40, 1)
	eval(t, s, check, op)

	// The failover: the old master follows the new one, and the name
	// leads to the new master only later.
	c := redis.NewClient(&redis.Options{Addr: oldMaster.Addr})
	defer func() { _ = c.Close() }()
	host, port, _ := net.SplitHostPort(newMaster.Addr)
	if err := c.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Eval(ctx, check, []ratelimit.Op{op})
	if err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("a check on the replica: %v, want READONLY", err)
	}
	dials := proxy.dials.Load()
	for i := range 100 {
		if _, err := s.Eval(ctx, ratelimit.ModePeek, []ratelimit.Op{op}); !errors.Is(err, ErrReplica) {
			t.Fatalf("peek %d on the replica: %v, want ErrReplica", i, err)
		}
		if _, err := s.Eval(ctx, check, []ratelimit.Op{op}); !errors.Is(err, ErrReplica) {
			t.Fatalf("check %d on the replica: %v, want ErrReplica", i, err)
		}
	}
	// A re-dial per call would make 200 connections or more; one a second
	// makes a few, unless the calls took tens of seconds.
	if n := proxy.dials.Load() - dials; n > 50 {
		t.Fatalf("%d connections to the name during 200 calls: a re-dial per call", n)
	}

	proxy.backend.Store(newMaster.Addr)
	waitFor(t, "a check succeeds on the new master", func() bool {
		_, err := s.Eval(ctx, check, []ratelimit.Op{op})
		return err == nil
	})
	nc := redis.NewClient(&redis.Options{Addr: newMaster.Addr})
	defer func() { _ = nc.Close() }()
	n, err := nc.Exists(ctx, op.Key).Result()
	if err != nil || n != 1 {
		t.Fatalf("the new master has the counter: %d, %v", n, err)
	}
}
