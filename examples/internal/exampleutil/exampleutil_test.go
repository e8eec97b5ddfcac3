package exampleutil

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
)

func TestNewStore(t *testing.T) {
	ctx := context.Background()
	t.Run("embedded", func(t *testing.T) {
		s, what, closeStore, err := NewStore(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		defer closeStore()
		if _, ok := s.(*ratelimit.MemoryStore); !ok || !strings.HasPrefix(what, "embedded") {
			t.Errorf("store %T %q, want the embedded memory store", s, what)
		}
	})
	t.Run("redis", func(t *testing.T) {
		url := redistest.URL(t)
		s, what, closeStore, err := NewStore(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer closeStore()
		if _, ok := s.(*redisstore.Store); !ok || !strings.HasPrefix(what, "redis ") {
			t.Errorf("store %T %q, want Redis", s, what)
		}
	})
	t.Run("bad URL", func(t *testing.T) {
		if _, _, _, err := NewStore(ctx, "redis://:hunter2@host:port"); err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("NewStore with a bad URL: %v; want an error without the password", err)
		}
	})
	// A program starts while its Redis is down: the store is made, and its
	// checks fail (the limiter fails open) until Redis answers.
	for name, url := range map[string]string{
		"unused port":  "redis://" + redistest.UnusedAddr(t),
		"secret in it": "redis://:hunter2@" + redistest.UnusedAddr(t),
	} {
		t.Run(name, func(t *testing.T) {
			s, what, closeStore, err := NewStore(ctx, url)
			if err != nil {
				t.Fatalf("NewStore with Redis down: %v", err)
			}
			defer closeStore()
			if strings.Contains(what, "hunter2") {
				t.Errorf("description %q shows the password", what)
			}
			_, err = s.Eval(ctx, ratelimit.ModeCheck, []ratelimit.Op{{Kind: ratelimit.OpCount, Key: "k", Cost: 1, Limit: 1, Period: time.Second}})
			if !errors.Is(err, redisstore.ErrNotConnected) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("check with Redis down: %v; want ErrNotConnected without the password", err)
			}
		})
	}
}

// NewRedisClient's errors never show the password of the URL: examples log
// them at start-up.
func TestNewRedisClientHidesPassword(t *testing.T) {
	for _, url := range []string{
		"redis://:s3cr3t-pw@127.0.0.1:1/0",    // nothing listens on port 1
		"redis://:s3cr3t-pw@127.0.0.1:port/0", // malformed
		"redis://:s3cr3t%zz@127.0.0.1:6379/0", // a bad escape inside the password
	} {
		_, err := NewRedisClient(context.Background(), url)
		if err == nil {
			t.Fatalf("NewRedisClient(%s) succeeded", url)
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("NewRedisClient(%s): error shows the password: %v", url, err)
		}
	}
}
