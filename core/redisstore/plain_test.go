package redisstore

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// recordingDialer dials TCP and keeps everything written on its connections,
// after passing each write through rewrite when it is set.
type recordingDialer struct {
	mu      sync.Mutex
	written bytes.Buffer
	rewrite func([]byte) []byte
}

func (d *recordingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &recordedConn{Conn: c, d: d}, nil
}

// take returns what was written since the last take.
func (d *recordingDialer) take() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.written.String()
	d.written.Reset()
	return s
}

type recordedConn struct {
	net.Conn
	d *recordingDialer
}

func (c *recordedConn) Write(b []byte) (int, error) {
	c.d.mu.Lock()
	if c.d.rewrite != nil {
		b = c.d.rewrite(bytes.Clone(b))
	}
	c.d.written.Write(b)
	c.d.mu.Unlock()
	return c.Conn.Write(b)
}

const (
	sentINCRBY  = "$6\r\nINCRBY\r\n"
	sentEVALSHA = "$7\r\nEVALSHA\r\n"
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
	d := &recordingDialer{}
	s, k := dialStore(t, redistest.URL(t), WithDialer(d.dial)), newKeyer(t)
	c := redistest.Client(t)
	d.take() // the greeting

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
	d := &recordingDialer{}
	s, k := dialStore(t, redistest.URL(t), WithDialer(d.dial)), newKeyer(t)
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
	d := &recordingDialer{rewrite: func(b []byte) []byte {
		return bytes.ReplaceAll(b, []byte("$7\r\nPEXPIRE\r\n"), []byte("$7\r\nPEXPIRX\r\n"))
	}}
	s, k := dialStore(t, redistest.URL(t), WithDialer(d.dial)), newKeyer(t)
	c := redistest.Client(t)

	op := terminal(k.count("old", 5, 1))
	expectOutcomes(t, "first", eval(t, s, check, op), ok(1, time.Minute))
	if got := pttl(t, c, op.Key); got <= 0 || got > time.Minute {
		t.Fatalf("PTTL = %v: the window was not started", got)
	}
	if !s.noPlain.Load() {
		t.Fatal("the Store did not notice the refused NX")
	}
	d.take()
	expectOutcomes(t, "second", eval(t, s, check, op), ok(2, time.Minute))
	if w := d.take(); !strings.Contains(w, sentEVALSHA) || strings.Contains(w, sentINCRBY) {
		t.Fatalf("after a refused NX the Store still sends plain commands: %q", w)
	}
}
