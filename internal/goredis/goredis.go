// Package goredis holds what ratekit's commands, examples and stores do
// alike with a go-redis client.
package goredis

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Silence drops go-redis's own log lines (a failed dial, again and again
// while Redis is down): they come as plain text among a program's records,
// and ratekit logs the store's failures itself.
func Silence() { redis.SetLogger(discard{}) }

type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}

// ReloadSlots has a cluster client fetch the slots' masters again, after a
// failed call: go-redis reloads them on MOVED, but not when the master it
// knows refuses connections or hangs, so after a failover every call went
// to the dead master until the client's periodic reload, 60 s after the
// last one. go-redis runs one reload at a time, at most one each 200ms, in
// the background: the next call uses it. c is any client (the stores take
// narrow interfaces); one without ReloadState is left alone.
func ReloadSlots(c any) {
	if cc, ok := c.(interface{ ReloadState(context.Context) }); ok {
		cc.ReloadState(context.Background())
	}
}
