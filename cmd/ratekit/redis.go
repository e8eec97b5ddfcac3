package main

import (
	"cmp"
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core/redisstore"
)

// redisClient connects to Redis for the CLI's commands. An operator waiting on
// a terminal wants a prompt answer: a refused connection is not redialled five
// times, and go-redis's own log lines are silenced (the error is reported).
func redisClient(url string, cluster bool) (redis.UniversalClient, error) {
	redis.SetLogger(quietRedisLogger{})
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
