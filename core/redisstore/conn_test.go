package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// countingDialer dials TCP and counts the writes on every connection it
// made; while gate is set, each write first waits for it to be closed.
type countingDialer struct {
	writes atomic.Int64
	mu     sync.Mutex
	gate   chan struct{}
}

func (d *countingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, d: d}, nil
}

type countedConn struct {
	net.Conn
	d *countingDialer
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.d.writes.Add(1)
	c.d.mu.Lock()
	gate := c.d.gate
	c.d.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return c.Conn.Write(b)
}

func TestDialEvalAndDelete(t *testing.T) {
	s, k := dialStore(t, redistest.URL(t)), newKeyer(t)
	if !s.ContextBounded() {
		t.Fatal("a Store from Dial must be ContextBounded")
	}
	op := k.count("a", 2, 1)
	expectOutcomes(t, "1", eval(t, s, check, op), ok(1, time.Minute))
	expectOutcomes(t, "2", eval(t, s, check, op), ok(2, time.Minute))
	expectOutcomes(t, "3", eval(t, s, check, op), over(3, time.Minute))
	n, err := s.Delete(ctx, []string{op.Key, k.key("missing")})
	if err != nil || n != 1 {
		t.Fatalf("Delete = %d, %v; want 1, nil", n, err)
	}
	expectOutcomes(t, "after delete", eval(t, s, check, op), ok(1, time.Minute))
	if _, err := s.Eval(ctx, check, []ratelimit.Op{{Kind: ratelimit.OpCount, Key: k.key("bad"), Cost: 1, Limit: 1, Period: -time.Second}}); err != nil {
		t.Fatalf("a zero period is sent as 0 ms: %v", err)
	}
}

// TestDialScriptFlushed: after SCRIPT FLUSH the store falls back to EVAL,
// which caches the script again.
func TestDialScriptFlushed(t *testing.T) {
	c := redistest.Client(t)
	s, k := dialStore(t, redistest.URL(t), WithConns(1)), newKeyer(t)
	op := banned(k.count("a", 10, 1), time.Hour) // a ban: the script, not the plain form
	expectOutcomes(t, "1", eval(t, s, check, op), ok(1, time.Minute))
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	expectOutcomes(t, "after flush", eval(t, s, check, op), ok(2, time.Minute))
	if ok, err := c.ScriptExists(ctx, evaluateHash).Result(); err != nil || !ok[0] {
		t.Fatalf("script not cached again: %v %v", ok, err)
	}
	expectOutcomes(t, "3", eval(t, s, check, op), ok(3, time.Minute))
}

// TestDialURL: user, password and database of the URL reach the server,
// and errors never show the password.
func TestDialURL(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 3})
	defer admin.Close()
	if err := admin.Do(ctx, "ACL", "SETUSER", "limiter", "on", ">s3cret", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}

	s := dialStore(t, "redis://limiter:s3cret@"+srv.Addr+"/3")
	k := newKeyer(t)
	op := k.count("a", 10, 1)
	expectOutcomes(t, "db 3", eval(t, s, check, op), ok(1, time.Minute))
	if v, err := admin.Get(ctx, op.Key).Result(); err != nil || v != "1" {
		t.Fatalf("GET %s in db 3 = %q, %v; want 1", op.Key, v, err)
	}

	_, err := Dial(ctx, "redis://limiter:wrong-password@"+srv.Addr)
	if err == nil || strings.Contains(err.Error(), "wrong-password") || !strings.Contains(err.Error(), "AUTH") {
		t.Fatalf("Dial with a wrong password: %v; want an AUTH error without the password", err)
	}
	if _, err := Dial(ctx, "redis://"+redistest.UnusedAddr(t)); err == nil {
		t.Fatal("Dial to an address where nothing listens succeeded")
	}
	if _, err := Dial(ctx, "redis://u:p%zz@h:1"); err == nil || strings.Contains(err.Error(), "p%zz") {
		t.Fatalf("bad URL: %v", err)
	}
}

// TestDialClose: Close ends every goroutine of the store, and later calls fail
// with ErrClosed.
func TestDialClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s, err := Dial(ctx, redistest.URL(t), WithConns(3))
	if err != nil {
		t.Fatal(err)
	}
	k := newKeyer(t)
	eval(t, s, check, k.count("a", 10, 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(ctx, check, []ratelimit.Op{k.count("a", 10, 1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Eval after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Delete(ctx, []string{k.key("a")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Delete after Close: %v, want ErrClosed", err)
	}
	_ = s.Close() // twice is fine
}

// TestDialCoalesces proves that concurrent requests share writes: while one
// write is held back, 63 more requests queue up, and all of them go out in
// one more write.
func TestDialCoalesces(t *testing.T) {
	d := &countingDialer{}
	s, k := dialStore(t, redistest.URL(t), WithConns(1), WithDialer(d.dial)), newKeyer(t)
	gate := make(chan struct{})
	d.mu.Lock()
	d.gate = gate
	d.mu.Unlock()
	const callers = 64
	// The counters exist with their windows: the first write of a window
	// sends one more command (startWindow), in a write of its own.
	rc := redistest.Client(t)
	for i := range callers {
		if err := rc.Set(ctx, k.key(fmt.Sprint("c", i)), 0, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := d.writes.Load()
	var wg sync.WaitGroup
	counts := make([]float64, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() {
			out, err := s.Eval(ctx, check, []ratelimit.Op{k.count(fmt.Sprint("c", i), 100, float64(i+1))})
			if err == nil {
				counts[i] = out[0].Count
			}
			errs[i] = err
		})
	}
	c := s.pool.conns[0]
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		queued := len(c.queue)
		c.mu.Unlock()
		if queued == callers-1 && d.writes.Load()-before == 1 {
			break // one caller is in its write, the others wait for it
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %d queued, %d writes; want %d and 1", queued, d.writes.Load()-before, callers-1)
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || counts[i] != float64(i+1) {
			t.Fatalf("caller %d: count %v, err %v; want %d", i, counts[i], errs[i], i+1)
		}
	}
	if n := d.writes.Load() - before; n != 2 {
		t.Fatalf("%d writes for %d concurrent requests, want 2", n, callers)
	}

	// Free-running callers: figures only, the share depends on the machine.
	d.mu.Lock()
	d.gate = nil
	d.mu.Unlock()
	before = d.writes.Load()
	var checks atomic.Int64
	for i := range callers {
		wg.Go(func() {
			for range 100 {
				if _, err := s.Eval(ctx, check, []ratelimit.Op{k.count(fmt.Sprint("f", i), 1<<40, 1)}); err != nil {
					t.Error(err)
					return
				}
				checks.Add(1)
			}
		})
	}
	wg.Wait()
	t.Logf("%d writes for %d checks of %d free-running callers", d.writes.Load()-before, checks.Load(), callers)
}

// TestDialCancel: callers whose context ends early return at once, and the
// replies of everybody else still reach the right caller. Each caller has a
// key and a period of its own, so a reply delivered to the wrong caller
// would show a wrong TTL or count.
func TestDialCancel(t *testing.T) {
	s, k := dialStore(t, redistest.URL(t), WithConns(2)), newKeyer(t)
	const callers = 32
	var wg sync.WaitGroup
	var canceled, answered atomic.Int64
	for i := range callers {
		wg.Go(func() {
			period := time.Duration(i+1) * time.Hour
			op := k.count(fmt.Sprint("k", i), 1<<40, 1)
			op.Period = period
			last := 0.0
			for j := range 200 {
				cctx, cancel := context.WithCancel(ctx)
				switch j % 3 {
				case 0:
					cancel() // some before the send, some while waiting
				case 1:
					go cancel()
				}
				out, err := s.Eval(cctx, check, []ratelimit.Op{op})
				cancel()
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						t.Errorf("caller %d: %v", i, err)
						return
					}
					canceled.Add(1)
					continue
				}
				answered.Add(1)
				o := out[0]
				if o.TTL > period || o.TTL <= period-time.Hour || o.Count <= last {
					t.Errorf("caller %d got %+v after count %v: a reply for another caller (period %v)", i, o, last, period)
					return
				}
				last = o.Count
			}
		})
	}
	wg.Wait()
	t.Logf("%d answered, %d canceled", answered.Load(), canceled.Load())
	if answered.Load() == 0 {
		t.Fatal("no check was answered")
	}
}
