package ratekitenvoy_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratelimit "github.com/ratekit/ratekit/core"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
)

// TestShouldRateLimitAllocations bounds the allocations of an answer on the
// memory store, in process: the request's identifiers, the answer's messages
// (in one block per kind) and its headers, and nothing per descriptor beyond
// its identifier and its part of the blocks. The bounds leave one allocation
// of room, and the race detector (whose pools drop some of what is put back)
// more; before the descriptors went through one batch an answer took 32 and
// 68, before the headers went straight into the answer 21 and 33; before the
// answer to one descriptor came in one allocation (its response, status,
// limit, reset, check request and result, and headers) 15 and 27; 5 and 23
// after; 5 and 21 since the response and headers of an answer to several
// descriptors come in one allocation too (under the race detector 7 and 35,
// now 7 and 33); 5 and 19 (7 and 30) since the checks' requests and a single
// check's result are on the stack and the statuses of up to 8 descriptors in
// the response's allocation. Of these, each descriptor's identifier takes 3: a
// ratelimit.Identifier is a map[string]any, whose header, group and boxed
// string value are one each. A descriptor with a hits_addend and a limit
// override adds its options and the override's per-request tier, and
// nothing for the override's cache key (16 before the key was built on the
// stack and the options went into the answer's block, 11 after; 9 since a
// small cost's option is built once). With Options.ReuseIdentifiers an
// identifier takes 1, its boxed value: its map comes from an earlier request
// (3 and 9 where a new one per check took 5 and 19).
func TestShouldRateLimitAllocations(t *testing.T) {
	for _, tt := range []struct {
		descriptors int
		options     bool // the first descriptor has a hits_addend and a limit override
		reuse       bool // Options.ReuseIdentifiers
		max         float64
	}{
		{1, false, false, 6},
		{5, false, false, 20},
		{1, true, false, 10},
		{1, false, true, 4},
		{5, false, true, 10},
		{1, true, true, 8},
	} {
		t.Run(fmt.Sprintf("%d/options=%v/reuse=%v", tt.descriptors, tt.options, tt.reuse), func(t *testing.T) {
			l := newLimiter(t, ratelimit.NewMemoryStore(), "", nil)
			svc, err := ratekitenvoy.NewService([]*ratelimit.Limiter{l}, ratekitenvoy.Options{Available: available(t), ReuseIdentifiers: tt.reuse})
			if err != nil {
				t.Fatal(err)
			}
			req := &rlsv3.RateLimitRequest{Domain: "edge"}
			for i := range tt.descriptors {
				req.Descriptors = append(req.Descriptors, &rlcommonv3.RateLimitDescriptor{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.9.0." + strconv.Itoa(i)}}})
			}
			if tt.options {
				req.Descriptors[0].HitsAddend = wrapperspb.UInt64(2)
				req.Descriptors[0].Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: typev3.RateLimitUnit_MINUTE}
			}
			ctx := context.Background()
			got := testing.AllocsPerRun(500, func() {
				resp, err := svc.ShouldRateLimit(ctx, req)
				if err != nil || resp.GetStatuses()[0].GetCurrentLimit() == nil {
					t.Fatalf("answer %v, %v", resp, err)
				}
			})
			max := tt.max
			if raceEnabled {
				max += 3 * float64(tt.descriptors)
			}
			t.Logf("%v allocations", got)
			if got > max {
				t.Fatalf("%v allocations per answer of %d descriptors, want at most %v", got, tt.descriptors, max)
			}
		})
	}
}
