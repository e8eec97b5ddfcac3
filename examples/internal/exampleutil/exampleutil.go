// Package exampleutil is the plumbing every example program shares, whatever
// its transport: the counter store (embedded, or Redis when REDIS_URL is set)
// and the Redis client behind it.
package exampleutil

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
)

// CheckTimeoutFlag defines -check-timeout on the command line, stored in p:
// the Config.Timeout of the program's limiters, how long a check (or a
// clear) waits for Redis before it fails open. Its default is the product's,
// ratelimit.DefaultTimeout; every example program takes it, under this one
// name.
func CheckTimeoutFlag(p *time.Duration) {
	flag.DurationVar(p, "check-timeout", ratelimit.DefaultTimeout,
		"how long a rate-limit check waits for Redis before it fails open (the limiters' Config.Timeout)")
}

// TestCheckTimeout is the check timeout the examples' tests give a program on
// Redis: they need every check answered, and a loaded machine's Redis may
// take longer than the default 100ms to answer one.
const TestCheckTimeout = 5 * time.Second

// NewStore returns the embedded store, or Redis when redisURL is set, with a
// description for the start-up log and a close function. With Redis down the
// program starts all the same: its checks fail open until the store connects.
func NewStore(ctx context.Context, redisURL string) (ratelimit.Store, string, func(), error) {
	if redisURL == "" {
		return ratelimit.NewMemoryStore(), "embedded in-memory (set REDIS_URL for Redis)", func() {}, nil
	}
	opt, err := redisstore.ParseURL(redisURL) // its errors never show the URL's password
	if err != nil {
		return nil, "", nil, err
	}
	store, err := redisstore.Dial(ctx, redisURL)
	if err != nil {
		return nil, "", nil, err
	}
	return store, "redis " + strings.Join(opt.InitAddress, ","), func() { _ = store.Close() }, nil
}

// NewRedisClient connects a go-redis client to the Redis at redisURL (any URL
// redisstore.Dial takes) and checks that it answers, for a program that needs
// go-redis itself. The URL is left out of errors: it may hold a password.
func NewRedisClient(ctx context.Context, redisURL string) (redis.UniversalClient, error) {
	opt, err := redisstore.ParseURL(redisURL)
	if err != nil {
		return nil, err
	}
	client := redis.NewUniversalClient(redisstore.GoRedisOptions(opt))
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis %s: %w", strings.Join(opt.InitAddress, ","), err)
	}
	return client, nil
}

// Service is the examples' service name in Redis: their counters and rules
// live under the prefixes `ratekit --service examples` assumes, like those
// of a service made from the copier template.
const Service = "examples"

// Prefixes of the examples' keys in Redis: the ratekit CLI's for --service
// examples.
const (
	KeyPrefix   = "ratekit:" + Service + ":rl:"
	RulesPrefix = "ratekit:rules:{" + Service + "}:"
)
