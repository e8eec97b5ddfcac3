package redistest

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts what a client sends: one per
// command or pipeline it processes, which is one network round trip (per node,
// for node clients of a cluster). With Record set it also keeps their names.
type RoundTrips struct {
	N      atomic.Int64
	Record bool
	mu     sync.Mutex
	trips  []string
}

var _ redis.Hook = (*RoundTrips)(nil)

// DialHook implements redis.Hook.
func (h *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.N.Add(1)
		if h.Record {
			h.add(cmd.Name())
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.N.Add(1)
		if h.Record {
			names := make([]string, len(cmds))
			for i, c := range cmds {
				names[i] = c.Name()
			}
			h.add("pipeline[" + strings.Join(names, ",") + "]")
		}
		return next(ctx, cmds)
	}
}

func (h *RoundTrips) add(s string) {
	h.mu.Lock()
	h.trips = append(h.trips, s)
	h.mu.Unlock()
}

// Take returns the trips recorded since the last Take.
func (h *RoundTrips) Take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.trips
	h.trips = nil
	return t
}
