package main

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/goredis"
)

// redisClient connects to Redis for the CLI's commands. An operator waiting on
// a terminal wants a prompt answer: a refused connection is not redialled five
// times, and go-redis's own log lines are silenced (the error is reported).
// It takes the URLs of redisstore.Dial (one server, a cluster's nodes, or
// sentinels with master_set); cluster forces the cluster client for a URL of
// one node. The CLI's rule store needs go-redis, and the counters share its
// client (redisstore.New).
func redisClient(url string, cluster bool) (redis.UniversalClient, error) {
	goredis.Silence()
	if err := schemeless(url); err != nil {
		return nil, err
	}
	opt, err := redisstore.ParseURL(url) // its errors never quote the URL (a password)
	if err != nil {
		return nil, err
	}
	uo := redisstore.GoRedisOptions(opt)
	uo.IsClusterMode = cluster
	uo.DialerRetries = cmp.Or(uo.DialerRetries, 1)
	return redis.NewUniversalClient(uo), nil
}

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
