package rulestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/redistest"
)

// A write whose reply may have come after Redis ran it is ErrUnconfirmed;
// one Redis refused, or that never reached it, wrote nothing and says so
// (the admin page tells an operator which).
func TestUnanswered(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a closed client", redis.ErrClosed, false},
		{"an error Redis answered", fmt.Errorf("write: %w", redisErr("OOM command not allowed")), false},
		{"no connection", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, false},
		{"the pool's wait", redis.ErrPoolTimeout, false},
		{"a timeout after the send", context.DeadlineExceeded, true},
		{"a read that timed out", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}, true},
		{"a connection lost", io.EOF, true},
	} {
		if got := unanswered(tc.err); got != tc.want {
			t.Errorf("%s (%v): unanswered %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}

	// End to end: with nothing listening, a write fails before it is sent.
	c := redis.NewClient(&redis.Options{Addr: redistest.UnusedAddr(t), MaxRetries: -1})
	defer c.Close()
	s, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, "search"); err == nil || errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("Remove with Redis down: %v, want an error that is not ErrUnconfirmed", err)
	}
}

// redisErr is an error reply of Redis, as go-redis returns one.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (e redisErr) RedisError()   {}

// replyDropper is a go-redis hook that runs the calls of one script (by its
// SHA-1, or by its source once Redis answered NOSCRIPT) and then reports a
// timeout, as a call whose reply was lost after Redis ran it.
type replyDropper struct{ sha, src string }

func (h replyDropper) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h replyDropper) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if err == nil && len(args) > 1 && (args[1] == h.sha || args[1] == h.src) {
			err = context.DeadlineExceeded
			cmd.SetErr(err)
		}
		return err
	}
}

func (h replyDropper) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A GC whose reply is lost may have collected: its error is ErrUnconfirmed,
// as a write's is, so that the CLI's audit record says the outcome is
// unknown; it said nothing was done while the document was gone. A dry run
// writes nothing, so its lost reply is a plain error.
func TestGCOfUnknownOutcome(t *testing.T) {
	direct := redistest.Client(t)
	opt, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	defer c.Close()
	c.AddHook(replyDropper{gcScript.Hash(), revcheckLua + gcLua})
	s := newStore(t, c, Options{GCGrace: time.Hour})
	now := time.UnixMilli(1_800_000_000_000)
	s.gcNow = func() time.Time { return now }
	seedAll(t, newStore(t, direct, Options{Prefix: s.prefix}), "gone")
	if err := direct.HSet(ctx, s.orphansKey(), "gone", now.Add(-2*time.Hour).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CheckGC(ctx, available(t)); err == nil || errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("CheckGC with its reply lost: %v, want an error that is not ErrUnconfirmed", err)
	}
	if !exists(t, direct, s.Key("gone")) {
		t.Fatal("CheckGC deleted the document")
	}
	if _, err := s.GC(ctx, available(t)); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("GC with its reply lost: %v, want ErrUnconfirmed", err)
	}
	if exists(t, direct, s.Key("gone")) {
		t.Fatal("the GC did not run: the case proves nothing")
	}
}
