package ratelimit

import (
	"context"
	"fmt"
	"time"
)

var _ BatchStore = (*MemoryStore)(nil)

// EvalBatch implements BatchStore: each check's ops are applied as Eval
// applies them, check after check. In process there is no round trip to
// save; it serves stores that wrap the memory store, and callers that build
// their own ops.
func (s *MemoryStore) EvalBatch(ctx context.Context, mode Mode, batch [][]Op) ([][]OpResult, error) {
	n := 0
	for i, ops := range batch {
		if err := CheckCosts(ops); err != nil {
			return nil, fmt.Errorf("ratelimit: memory store: check %d: %w", i, err)
		}
		n += len(ops)
	}
	all := make([]OpResult, n) // one allocation for every check's outcomes
	outs := make([][]OpResult, len(batch))
	for i, ops := range batch {
		out, err := s.evalInto(ctx, mode, ops, all[:len(ops):len(ops)], time.Time{}, 0)
		if err != nil {
			return nil, err
		}
		outs[i], all = out, all[len(ops):]
	}
	return outs, nil
}
