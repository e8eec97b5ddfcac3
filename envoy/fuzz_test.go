package ratekitenvoy_test

import (
	"context"
	"fmt"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratelimit "github.com/ratekit/ratekit/core"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
)

// FuzzShouldRateLimit feeds hostile wire bytes to the service: every request
// that decodes gets either a well-formed answer (one status per descriptor)
// or INVALID_ARGUMENT / NOT_FOUND, never a panic or an internal error.
func FuzzShouldRateLimit(f *testing.F) {
	over := desc("remote_address", "1.2.3.4")
	over.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(7)}
	over.HitsAddend = wrapperspb.UInt64(2)
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("remote_address", "1.2.3.4")}},
		{Domain: "edge", HitsAddend: 3, Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("generic_key", "api", "user", "u"), over, desc("path", "/")}},
		{Domain: "nope", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("a", "b")}},
		{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{{IsNegativeHits: true}}},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x0a\x04edge\x12\x16\x0a\x14\x0a\x0eremote_address\x12\x02\xff\xfe"))
	l := newLimiter(f, ratelimit.NewMemoryStore(), "", nil)
	svc, err := ratekitenvoy.NewService([]*ratelimit.Limiter{l}, ratekitenvoy.Options{Available: available(f)})
	if err != nil {
		f.Fatal(err)
	}
	codec := svc.Codec() // as the server decodes: values that are not UTF-8 included
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &rlsv3.RateLimitRequest{}
		if codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, req) != nil {
			return // gRPC rejects these before the service sees them
		}
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.NotFound {
				t.Fatalf("%v for %v", err, req)
			}
			return
		}
		if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
	})
}

// A panic below the service (here a limit resolver's) is recovered and
// answered INTERNAL, which Envoy treats as an error (fail-open by default).
func TestPanicIsRecovered(t *testing.T) {
	l := panickingLimiter(t, "edge")
	g := startGateway(t, l, nil, ratekitenvoy.Options{Concurrent: true})
	// One descriptor is checked on the caller's goroutine, several
	// concurrently: a panic is recovered either way.
	for _, n := range []int{1, 3} {
		req := &rlsv3.RateLimitRequest{Domain: "edge"}
		for i := range n {
			req.Descriptors = append(req.Descriptors, desc("remote_address", fmt.Sprint("1.2.3.", i)))
		}
		_, err := g.client.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.Internal {
			t.Fatalf("%d descriptors: got %v, want INTERNAL", n, err)
		}
	}
	if got := counter(t, g.reg, "ratekit_envoy_requests_total", map[string]string{"domain": "edge", "code": "internal"}); got != 2 {
		t.Errorf("internal answers counted %v, want 2", got)
	}
	// The server survived: the next call is answered too.
	_, err := g.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("after the panic: %v", err)
	}
}
