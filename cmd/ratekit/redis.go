package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core/redisstore"
)

// redisClient connects to Redis for the CLI's commands. An operator waiting on
// a terminal wants a prompt answer: a refused connection is not redialled five
// times, and go-redis's own log lines are silenced (the error is reported).
func redisClient(url string, cluster bool) (redis.UniversalClient, error) {
	redis.SetLogger(quietRedisLogger{})
	if err := schemeless(url); err != nil {
		return nil, err
	}
	if cluster {
		opt, err := redisstore.ParseClusterURL(url) // its errors never quote the URL (a password)
		if err != nil {
			return nil, err
		}
		opt.DialerRetries = cmp.Or(opt.DialerRetries, 1)
		return redis.NewClusterClient(opt), nil
	}
	opt, err := redisstore.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.DialerRetries = cmp.Or(opt.DialerRetries, 1)
	return redis.NewClient(opt), nil
}

type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}

// schemeless explains a Redis address given without its scheme, which Go's
// URL parser would report as "first path segment in URL cannot contain
// colon". The address is quoted only when it holds no credentials.
func schemeless(url string) error {
	if strings.Contains(url, "://") {
		return nil
	}
	if strings.Contains(url, "@") {
		return errors.New("not a URL: write it redis://[user:pass@]host:port[/db] (rediss:// for TLS)")
	}
	return fmt.Errorf("%q is not a URL: did you mean redis://%s?", url, url)
}
