package redisstore

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// recordingClient is a rueidis client that keeps the names of the commands
// sent through it, after passing each through rewrite when it is set.
type recordingClient struct {
	rueidis.Client
	mu      sync.Mutex
	sent    []string
	trips   int // calls of Do and DoMulti: round trips
	rewrite func(c rueidis.Client, cmd rueidis.Completed) rueidis.Completed
	codes   []string // the op codes of the script calls sent
}

func (r *recordingClient) record(cmd rueidis.Completed) rueidis.Completed {
	r.mu.Lock()
	args := cmd.Commands()
	r.sent = append(r.sent, args[0])
	if args[0] == "EVALSHA" || args[0] == "EVAL" {
		nkeys, _ := strconv.Atoi(args[2])
		for _, a := range args[3+nkeys:] {
			if slices.Contains(opCodes[:], a) {
				r.codes = append(r.codes, a)
			}
		}
	}
	r.mu.Unlock()
	if r.rewrite != nil {
		return r.rewrite(r.Client, cmd)
	}
	return cmd
}

func (r *recordingClient) trip() {
	r.mu.Lock()
	r.trips++
	r.mu.Unlock()
}

func (r *recordingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	r.trip()
	return r.Client.Do(ctx, r.record(cmd))
}

func (r *recordingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	r.trip()
	for i := range cmds {
		cmds[i] = r.record(cmds[i])
	}
	return r.Client.DoMulti(ctx, cmds...)
}

// take returns the commands sent since the last take, space-separated.
func (r *recordingClient) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := strings.Join(r.sent, " ")
	r.sent = nil
	return s
}

// takeCodes returns the op codes of the script calls sent since the last
// takeCodes, space-separated.
func (r *recordingClient) takeCodes() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := strings.Join(r.codes, " ")
	r.codes = nil
	return s
}

// takeTrips returns the round trips since the last takeTrips.
func (r *recordingClient) takeTrips() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.trips
	r.trips = 0
	return n
}

// recordedStore returns a Store from Open on the standalone test server whose
// client is r.
func recordedStore(t *testing.T, r *recordingClient) *Store {
	t.Helper()
	return recordedStoreOn(t, redistest.URL(t), r)
}

// recordedStoreOn is recordedStore on the Redis at url.
func recordedStoreOn(t *testing.T, url string, r *recordingClient) *Store {
	t.Helper()
	o, err := ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, Options{Client: o, RequireConnection: true, wrap: func(c rueidis.Client) rueidis.Client {
		r.Client = c
		return r
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

const (
	sentINCRBY  = "INCRBY"
	sentEVALSHA = "EVALSHA"
)

func TestPlainOps(t *testing.T) {
	k := keyer("p")
	c := k.count("a", 5, 1)
	tests := []struct {
		name string
		mode ratelimit.Mode
		ops  []ratelimit.Op
		want bool
	}{
		{"one counter", check, []ratelimit.Op{c}, true},
		{"one terminal counter", check, []ratelimit.Op{terminal(c)}, true},
		{"terminal last", check, []ratelimit.Op{c, c, terminal(c)}, true},
		{"none terminal", check, []ratelimit.Op{c, c}, true},
		{"terminal first", check, []ratelimit.Op{terminal(c), c}, false},
		{"peek", peek, []ratelimit.Op{c}, false},
		{"ban", check, []ratelimit.Op{banned(c, time.Hour)}, false},
		{"ban key without ban time", check, []ratelimit.Op{banned(c, 0)}, false},
		{"fractional cost", check, []ratelimit.Op{k.count("a", 5, 0.5)}, false},
		{"cost zero", check, []ratelimit.Op{k.count("a", 5, 0)}, false},
		{"negative cost", check, []ratelimit.Op{k.count("a", 5, -1)}, false},
		{"distinct", check, []ratelimit.Op{k.distinct("a", "m", 5)}, false},
		{"one of several not short", check, []ratelimit.Op{c, k.distinct("a", "m", 5)}, false},
	}
	for _, tt := range tests {
		if got := plainOps(tt.mode, tt.ops); got != tt.want {
			t.Errorf("%s: plainOps = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPlainForm: the usual check is sent as plain commands, the others as the
// script, and both give the script's outcomes.
func TestPlainForm(t *testing.T) {
	d := &recordingClient{}
	s, k := recordedStore(t, d), newKeyer(t)
	c := redistest.Client(t)

	op := terminal(k.count("a", 2, 1))
	expectOutcomes(t, "1", eval(t, s, check, op), ok(1, time.Minute))
	if got := pttl(t, c, op.Key); got <= 0 || got > time.Minute {
		t.Fatalf("PTTL after the first write = %v, want the window", got)
	}
	expectOutcomes(t, "2", eval(t, s, check, op), ok(2, time.Minute))
	expectOutcomes(t, "3", eval(t, s, check, op), over(3, time.Minute))
	if w := d.take(); strings.Count(w, sentINCRBY) != 3 || strings.Contains(w, sentEVALSHA) {
		t.Fatalf("a one-counter check was not sent as plain commands: %q", w)
	}

	// A window is never extended, and a cost counts whole.
	short := terminal(k.count("short", 100, 7))
	if err := c.Set(ctx, short.Key, 3, 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	expectOutcomes(t, "running window", eval(t, s, check, short), ok(10, 30*time.Second))
	if got := pttl(t, c, short.Key); got > 30*time.Second {
		t.Fatalf("PTTL = %v: the window was extended", got)
	}

	// Only the last op terminal: every op is charged, exceeded or not, as
	// the script does.
	a, b := k.count("multi-a", 1, 2), terminal(k.count("multi-b", 1, 1))
	expectOutcomes(t, "multi", eval(t, s, check, a, b), over(2, time.Minute), ok(1, time.Minute))
	expectOutcomes(t, "multi again", eval(t, s, check, a, b), over(4, time.Minute), over(2, time.Minute))
	if w := d.take(); strings.Count(w, sentINCRBY) != 5 || strings.Contains(w, sentEVALSHA) {
		t.Fatalf("plain checks sent %q", w)
	}

	// A terminal op before another: the script, which stops at it.
	x, y := terminal(k.count("stop-x", 0, 1)), k.count("stop-y", 5, 1)
	expectOutcomes(t, "stop", eval(t, s, check, x, y), over(1, time.Minute), skipped)
	if w := d.take(); !strings.Contains(w, sentEVALSHA) || strings.Contains(w, sentINCRBY) {
		t.Fatalf("a check that may stop early was not sent as the script: %q", w)
	}
	if exists(t, c, y.Key) {
		t.Fatal("an op after an exceeded terminal op was charged")
	}
}

// TestPlainRefused: a counter INCRBY refuses (a fractional count, a value of
// another type) is evaluated by the script, with the script's outcome.
func TestPlainRefused(t *testing.T) {
	d := &recordingClient{}
	s, k := recordedStore(t, d), newKeyer(t)
	c := redistest.Client(t)

	frac := terminal(k.count("frac", 10, 1))
	if err := c.Set(ctx, frac.Key, "1.5", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	d.take()
	expectOutcomes(t, "fractional", eval(t, s, check, frac), ok(2.5, time.Minute))
	if w := d.take(); !strings.Contains(w, sentINCRBY) || !strings.Contains(w, sentEVALSHA) {
		t.Fatalf("want the plain commands, then the script: %q", w)
	}

	foreign := terminal(k.count("foreign", 10, 1))
	if err := c.SAdd(ctx, foreign.Key, "m").Err(); err != nil {
		t.Fatal(err)
	}
	expectOutcomes(t, "foreign", eval(t, s, check, foreign), ok(1, time.Minute))
	if got, err := c.Get(ctx, foreign.Key).Result(); err != nil || got != "1" {
		t.Fatalf("the foreign value was not replaced by a counter: %q, %v", got, err)
	}

	// One refused op among plain ones: each is charged once.
	a, b := k.count("mix-a", 10, 1), terminal(k.count("mix-b", 10, 2))
	if err := c.Set(ctx, a.Key, "0.5", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	expectOutcomes(t, "mixed", eval(t, s, check, a, b), ok(1.5, time.Minute), ok(2, time.Minute))
	expectOutcomes(t, "mixed again", eval(t, s, check, a, b), ok(2.5, time.Minute), ok(4, time.Minute))
}

// TestPlainWithoutNX: a server that refuses PEXPIRE's NX (Redis before 7.0,
// played by renaming the command on its way out, so that the real server
// answers "unknown command") still gets its windows, and the Store sends the
// script from then on.
func TestPlainWithoutNX(t *testing.T) {
	d := &recordingClient{rewrite: func(c rueidis.Client, cmd rueidis.Completed) rueidis.Completed {
		if args := cmd.Commands(); args[0] == "PEXPIRE" {
			return c.B().Arbitrary("PEXPIRX").Keys(args[1]).Args(args[2:]...).Build()
		}
		return cmd
	}}
	s, k := recordedStore(t, d), newKeyer(t)
	c := redistest.Client(t)

	op := terminal(k.count("old", 5, 1))
	expectOutcomes(t, "first", eval(t, s, check, op), ok(1, time.Minute))
	if got := pttl(t, c, op.Key); got <= 0 || got > time.Minute {
		t.Fatalf("PTTL = %v: the window was not started", got)
	}
	if !s.dialed.noPlain.Load() {
		t.Fatal("the Store did not notice the refused NX")
	}
	d.take()
	expectOutcomes(t, "second", eval(t, s, check, op), ok(2, time.Minute))
	if w := d.take(); !strings.Contains(w, sentEVALSHA) || strings.Contains(w, sentINCRBY) {
		t.Fatalf("after a refused NX the Store still sends plain commands: %q", w)
	}
}

// TestPlainRemembersWindow: once the Store has read a counter's window, its
// next checks send INCRBY alone, with the same outcomes; a key gone before
// the remembered end (deleted elsewhere) gets its window again, and a key
// the Store deletes is read afresh.
func TestPlainRemembersWindow(t *testing.T) {
	for _, tt := range []struct {
		name   string
		url    func(testing.TB) string
		client func(testing.TB) redis.UniversalClient
	}{
		{"standalone", redistest.URL, func(t testing.TB) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", redistest.ClusterURL, func(t testing.TB) redis.UniversalClient { return redistest.ClusterClient(t) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := &recordingClient{}
			s, k := recordedStoreOn(t, tt.url(t), d), newKeyer(t)
			c := tt.client(t)

			op := terminal(k.count("a", 3, 1))
			expectOutcomes(t, "first", eval(t, s, check, op), ok(1, time.Minute))
			if w := d.take(); w != "INCRBY PEXPIRE PTTL" {
				t.Fatalf("first check sent %q, want the window read", w)
			}
			expectOutcomes(t, "second", eval(t, s, check, op), ok(2, time.Minute))
			expectOutcomes(t, "third", eval(t, s, check, op), ok(3, time.Minute))
			expectOutcomes(t, "fourth", eval(t, s, check, op), over(4, time.Minute))
			if w := d.take(); w != "INCRBY INCRBY INCRBY" {
				t.Fatalf("checks in a remembered window sent %q, want INCRBY alone", w)
			}

			// Deleted behind the Store's back: INCRBY makes the key anew
			// without a TTL, and the Store starts its window.
			if err := c.Del(ctx, op.Key).Err(); err != nil {
				t.Fatal(err)
			}
			d.takeTrips()
			expectOutcomes(t, "after a foreign delete", eval(t, s, check, op), ok(1, time.Minute))
			if w, trips := d.take(), d.takeTrips(); w != "INCRBY PEXPIRE PTTL" || trips != 2 {
				t.Fatalf("after a foreign delete: sent %q in %d round trips, want INCRBY, then PEXPIRE PTTL", w, trips)
			}
			if got := pttl(t, c, op.Key); got <= 0 || got > time.Minute {
				t.Fatalf("PTTL after a foreign delete = %v, want a window", got)
			}

			// A negative value written there (INCRBY answers less than the
			// cost): the window is read, not assumed.
			if err := c.Set(ctx, op.Key, -5, 20*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			if got := eval(t, s, check, op)[0].TTL; got <= 0 || got > 20*time.Second {
				t.Fatalf("TTL over a negative value = %v, want the key's (20s)", got)
			}
			d.take()

			// The Store's own delete forgets the window: one round trip.
			if _, err := s.Delete(ctx, []string{op.Key}); err != nil {
				t.Fatal(err)
			}
			d.take()
			d.takeTrips()
			expectOutcomes(t, "after Delete", eval(t, s, check, op), ok(1, time.Minute))
			if w, trips := d.take(), d.takeTrips(); w != "INCRBY PEXPIRE PTTL" || trips != 1 {
				t.Fatalf("after Delete: sent %q in %d round trips, want the full form in one", w, trips)
			}
		})
	}
}
