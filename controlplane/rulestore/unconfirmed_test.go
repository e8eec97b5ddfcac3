package rulestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

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
