package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestRawEvalMatchesAppendEval: the pooled command of a *redis.Client sends
// exactly what the pipelined connection sends (appendEval), argument by
// argument as go-redis writes them, whatever the pooled command sent before.
func TestRawEvalMatchesAppendEval(t *testing.T) {
	checks := [][]ratelimit.Op{
		{{Kind: ratelimit.OpCount, Key: "{u}:a", Cost: 1, Limit: 10, Period: time.Minute, Terminal: true}},
		{
			{Kind: ratelimit.OpCount, Key: "k1", Cost: 0.25, Limit: 10, Period: 1500 * time.Microsecond, Terminal: true},
			{Kind: ratelimit.OpDistinct, Key: "k2", BanKey: "k2:ban", Member: "m", Cost: 1, Limit: 3, Period: time.Hour, BanFor: time.Minute},
			{Kind: ratelimit.OpCount, Key: "k3", Cost: 2, Limit: 1 << 62, Period: time.Second},
		},
		{{Kind: ratelimit.OpCount, Key: "{longer key}:b", BanKey: "{longer key}:b:ban", Cost: 3, Limit: 1, Period: time.Minute, BanFor: time.Hour}},
		{{Kind: ratelimit.OpCount, Key: "x", Cost: 1, Limit: 10, Period: time.Minute}},
	}
	var many []ratelimit.Op // longer than maxPooledArgs: made afresh each time
	for i := range 12 {
		many = append(many, ratelimit.Op{Kind: ratelimit.OpDistinct, Key: fmt.Sprint("{m}:", i), BanKey: fmt.Sprint("{m}:", i, ":ban"),
			Member: fmt.Sprint("member", i), Cost: 1, Limit: int64(i), Period: time.Minute, BanFor: time.Minute})
	}
	checks = append(checks, many)
	for round := range 4 { // rounds 2 and 3 reuse pooled commands
		raw := []rawMode{rawReused, rawRouted}[round%2]
		for _, mode := range []ratelimit.Mode{ratelimit.ModeCheck, ratelimit.ModePeek} {
			for i, ops := range checks {
				sh := evalShapeOf(mode, ops)
				e := getRawEval(sh.nargs)
				e.fill(raw, mode, ops, sh)
				if _, ok := e.args[3].(string); ok != (raw == rawRouted) {
					t.Errorf("round %d: KEYS[1] is %T", round, e.args[3])
				}
				var got []byte
				got = appendArrayHeader(got, len(e.args))
				for _, a := range e.args {
					switch a := a.(type) {
					case string:
						got = appendBulk(got, a)
					case *bulkArg:
						b, _ := a.MarshalBinary()
						if string(b) != a.String() {
							t.Fatalf("bulkArg %q marshals as %q", a.String(), b)
						}
						got = appendBulkBytes(got, b)
					case int:
						got = appendBulk(got, fmt.Sprint(a))
					default:
						t.Fatalf("argument %#v of type %T", a, a)
					}
				}
				want := strings.Replace(string(appendEval(nil, false, mode, ops)), "EVALSHA", "evalsha", 1)
				if string(got) != want {
					t.Errorf("round %d, %s, check %d:\n got %q\nwant %q", round, mode, i, got, want)
				}
				putRawEval(e)
			}
		}
	}
}

// TestRawEvalFormatsForHooks: a hook that formats the command (a tracing or
// logging hook) sees the keys, not pointers.
func TestRawEvalFormatsForHooks(t *testing.T) {
	c := redistest.Client(t)
	h := &formatHook{}
	c.AddHook(h)
	s, k := New(c), newKeyer(t)
	eval(t, s, check, k.count("a", 10, 1))
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seen) != 1 || !strings.Contains(h.seen[0], "evalsha "+evaluateHash+" 1 "+k.key("a")+" n 10 60000 1: ") {
		t.Fatalf("hook saw %q", h.seen)
	}
}

type formatHook struct {
	mu   sync.Mutex
	seen []string
}

func (h *formatHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *formatHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *formatHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.mu.Lock()
		h.seen = append(h.seen, cmd.String())
		h.mu.Unlock()
		return err
	}
}

// TestRawEvalErrorReply: an error reply reaches go-redis as a Redis error, as
// for its own commands: the connection stays in the pool, and the store
// returns the error.
func TestRawEvalErrorReply(t *testing.T) {
	c, _ := privateClient(t)
	s, k := New(c), newKeyer(t)
	eval(t, s, check, k.count("a", 10, 1))
	conns := c.PoolStats().TotalConns
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Eval(ctx, check, []ratelimit.Op{k.count("a", 10, 1)})
	var rerr redis.Error
	if !errors.As(err, &rerr) || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("error %v (%T), want a redis.Error with OOM", err, err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	expectOutcomes(t, "after the error", eval(t, s, check, k.count("a", 10, 1)), ok(2, time.Minute))
	if n := c.PoolStats().TotalConns; n != conns {
		t.Errorf("%d pooled connections after an error reply, %d before: the connection was dropped", n, conns)
	}
}

// TestRawEvalRetries: go-redis retries the pooled command as it retries its
// own (here on READONLY), since no reply byte was read.
func TestRawEvalRetries(t *testing.T) {
	c, _ := privateClient(t)
	s, k := New(c), newKeyer(t)
	eval(t, s, check, k.count("a", 10, 1))
	if err := c.Do(ctx, "REPLICAOF", "127.0.0.1", redistest.UnusedAddr(t)[len("127.0.0.1:"):]).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Do(context.Background(), "REPLICAOF", "NO", "ONE") })
	// The same command as a redis.Cmd, for the number of attempts go-redis makes.
	before, _ := scriptCalls(t, c)
	if err := c.Do(ctx, evalCmd(check, []ratelimit.Op{k.count("a", 10, 1)}, nil)...).Err(); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("redis.Cmd on a replica: %v", err)
	}
	mid, _ := scriptCalls(t, c)
	_, err := s.Eval(ctx, check, []ratelimit.Op{k.count("a", 10, 1)})
	if err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("check on a replica: %v", err)
	}
	after, _ := scriptCalls(t, c)
	if mid-before < 2 || after-mid != mid-before {
		t.Errorf("EVALSHA ran %d times for the check, %d for a redis.Cmd: want the same retries", after-mid, mid-before)
	}
}

// TestRawEvalAfterRestart: after a server restart every pooled connection is
// dead; checks carry on, with go-redis' health check of pooled connections
// (which drops them from the pool) and without it: a dead connection then
// fails on use, before any reply byte is read, and go-redis retries the check
// on another, up to MaxRetries (3) times; with a pool of 2 the third attempt
// dials afresh.
func TestRawEvalAfterRestart(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(map[bool]string{false: "health check", true: "no health check"}[plain], func(t *testing.T) {
			redistest.URL(t)
			srv := redistest.StartServer(t)
			opt := &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 2}
			if plain {
				opt.Dialer = plainDialer
			}
			c := redis.NewClient(opt)
			t.Cleanup(func() { _ = c.Close() })
			s, k := New(c), newKeyer(t)
			var wg sync.WaitGroup
			for range 2 { // open every connection of the pool
				wg.Go(func() { eval(t, s, check, k.count("a", 100, 1)) })
			}
			wg.Wait()
			srv.Stop()
			srv.Restart(t)
			for i := range 8 {
				expectOutcomes(t, fmt.Sprintf("check %d after the restart", i), eval(t, s, check, k.count("a", 100, 1)), ok(float64(i+1), time.Minute))
			}
		})
	}
}

// TestRawEvalConcurrentShapes: concurrent checks of different shapes share
// the pools of commands without mixing their arguments or replies.
func TestRawEvalConcurrentShapes(t *testing.T) {
	c := redistest.Client(t)
	s, k := New(c), newKeyer(t)
	const workers, each = 16, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			name := fmt.Sprint("w", w)
			for i := range each {
				var ops []ratelimit.Op
				switch w % 4 {
				case 0:
					ops = []ratelimit.Op{k.count(name, 1e6, 1)}
				case 1:
					ops = []ratelimit.Op{k.count(name, 1e6, 1), k.count(name+"b", 1e6, 2)}
				case 2:
					ops = []ratelimit.Op{k.distinct(name, fmt.Sprint("m", i), 1e6)}
				case 3:
					ops = []ratelimit.Op{banned(k.count(name, 1e6, 1), time.Minute), k.count(name+"b", 1e6, 0.5)}
				}
				out, err := s.Eval(ctx, check, ops)
				if err != nil {
					t.Error(err)
					return
				}
				n := float64(i + 1)
				for j, o := range out {
					want := n
					if w%4 == 1 && j == 1 {
						want = 2 * n
					} else if w%4 == 3 && j == 1 {
						want = n / 2
					}
					if !o.Evaluated || o.Count != want {
						t.Errorf("worker %d, check %d, op %d: %+v, want count %v", w, i, j, o, want)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestRawEvalGivenUp: on a hung server a Limiter gives up on checks that
// go-redis still waits on (a client without ContextTimeoutEnabled, guarded
// by the Limiter); their pooled commands are reused only once go-redis has
// returned them, and checks succeed again once the server answers.
func TestRawEvalGivenUp(t *testing.T) {
	redistest.URL(t)
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	l, err := ratelimit.New(ratelimit.Config{Name: "given_up", Store: New(c), KeyPrefix: redistest.Prefix(t), Timeout: 50 * time.Millisecond,
		Rules: []ratelimit.Rule{{Name: "r", Action: ratelimit.ActionLimit, Characteristics: []string{"user"}, Limit: 1 << 40, Period: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	check := func(user string) ratelimit.Result { return l.Check(ctx, ratelimit.Identifier{"user": user}) }
	if r := check("u"); r.Err != nil {
		t.Fatal(r.Err)
	}
	srv.Pause(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if r := check(fmt.Sprint("u", i)); r.Err == nil {
				t.Error("a check on a hung server succeeded")
			}
		})
	}
	wg.Wait()
	srv.Resume(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := check("v")
		if r.Err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no success within 30s of SIGCONT: %v", r.Err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 8 { // the pooled commands, given up or not, serve new checks
		wg.Go(func() {
			user := fmt.Sprint("w", i)
			for n := 1; n <= 20; n++ {
				r := check(user)
				if r.Err != nil || len(r.Evaluations) != 1 || r.Evaluations[0].Info.Count != float64(n) {
					t.Errorf("%s, check %d: %+v", user, n, r)
					return
				}
			}
		})
	}
	wg.Wait()
}
