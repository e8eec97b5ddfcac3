package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

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
// client (redisstore.New). timeout, the command's --timeout, also bounds each
// dial (see boundDial).
func redisClient(url string, cluster bool, timeout time.Duration) (redis.UniversalClient, error) {
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
	boundDial(uo, timeout)
	c := redis.NewUniversalClient(uo)
	where := "Redis at " + strings.Join(uo.Addrs, ",")
	if uo.MasterName != "" {
		where = "Redis (master set " + uo.MasterName + ", sentinels " + strings.Join(uo.Addrs, ",") + ")"
	}
	c.AddHook(unanswered{where})
	return c, nil
}

// goRedisDialTimeout is go-redis' dial timeout when its options leave it 0.
const goRedisDialTimeout = 5 * time.Second

// boundDial makes the dial timeout no longer than timeout. go-redis dials
// (and asks the sentinels for the master) under its dial timeout, not the
// command's context, and a FailoverClient's Close waits for the sentinels'
// answers: with the sentinels hung, a command with --timeout 1s failed after
// 1s and exited only when the dial timeout (5s by default, the URL's
// dial_timeout if set) ended.
func boundDial(uo *redis.UniversalOptions, timeout time.Duration) {
	if cmp.Or(uo.DialTimeout, goRedisDialTimeout) > timeout {
		uo.DialTimeout = timeout
	}
}

// unanswered names the server in the error of a command it did not answer:
// a timeout says nothing of where ("context deadline exceeded"), while a
// refused connection names the address. During an incident the operator
// learns which Redis hangs.
type unanswered struct{ where string }

func (h unanswered) name(err error) error {
	if h.timedOut(err) {
		return fmt.Errorf("%s did not answer: %w", h.where, err)
	}
	return err
}

func (unanswered) timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func (h unanswered) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h unanswered) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && h.timedOut(err) {
			err = h.name(err)
			cmd.SetErr(err)
		}
		return err
	}
}

func (h unanswered) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if e := cmd.Err(); e != nil {
				cmd.SetErr(h.name(e))
			}
		}
		if err != nil {
			return h.name(err)
		}
		return err
	}
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
