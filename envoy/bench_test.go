package ratekitenvoy_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
	"github.com/ratekit/ratekit/internal/redistest"
)

// BenchmarkShouldRateLimit compares the service (in process, without the
// gRPC hop; also with Options.ReuseIdentifiers, and with five descriptors
// with Options.Concurrent) with the same
// checks made on the limiter directly, one after the other, for one and five
// descriptors, on the in-memory store and on Redis (when
// RATEKIT_TEST_REDIS_URL is set) through go-redis (redisstore.New) and
// through redisstore.Dial, ratekit-envoy's store. The difference is the mapping's cost:
// validation, identifiers, statuses and headers.
func BenchmarkShouldRateLimit(b *testing.B) {
	stores := []struct {
		name string
		new  func(b *testing.B) (ratelimit.Store, string)
	}{
		{"memory", func(*testing.B) (ratelimit.Store, string) { return ratelimit.NewMemoryStore(), "" }},
	}
	if os.Getenv(redistest.EnvURL) != "" {
		stores = append(stores, struct {
			name string
			new  func(b *testing.B) (ratelimit.Store, string)
		}{"redis", func(b *testing.B) (ratelimit.Store, string) {
			return redisstore.New(redistest.Client(b)), redistest.Prefix(b)
		}}, struct {
			name string
			new  func(b *testing.B) (ratelimit.Store, string)
		}{"redis_dial", func(b *testing.B) (ratelimit.Store, string) { // ratekit-envoy's store
			s, err := redisstore.Dial(context.Background(), redistest.URL(b))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s, redistest.Prefix(b)
		}})
	}
	for _, st := range stores {
		for _, n := range []int{1, 5} {
			b.Run(fmt.Sprintf("%s/descriptors=%d", st.name, n), func(b *testing.B) {
				store, prefix := st.new(b)
				l := newLimiter(b, store, prefix, nil)
				svc, err := ratekitenvoy.NewService([]*ratelimit.Limiter{l}, ratekitenvoy.Options{Available: available(b)})
				if err != nil {
					b.Fatal(err)
				}
				concurrent, err := ratekitenvoy.NewService([]*ratelimit.Limiter{l}, ratekitenvoy.Options{Available: available(b), Concurrent: true})
				if err != nil {
					b.Fatal(err)
				}
				reuse, err := ratekitenvoy.NewService([]*ratelimit.Limiter{l}, ratekitenvoy.Options{Available: available(b), ReuseIdentifiers: true})
				if err != nil {
					b.Fatal(err)
				}
				req := &rlsv3.RateLimitRequest{Domain: "edge"}
				ids := make([]ratelimit.Identifier, n)
				for i := range n {
					ip := "10.9.0." + strconv.Itoa(i)
					req.Descriptors = append(req.Descriptors, &rlcommonv3.RateLimitDescriptor{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip}}})
					ids[i] = ratelimit.Identifier{"remote_address": ip}
				}
				ctx := context.Background()
				b.Run("service", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run("service_reuse", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, err := reuse.ShouldRateLimit(ctx, req); err != nil {
							b.Fatal(err)
						}
					}
				})
				if n > 1 {
					b.Run("service_concurrent", func(b *testing.B) {
						b.ReportAllocs()
						for b.Loop() {
							if _, err := concurrent.ShouldRateLimit(ctx, req); err != nil {
								b.Fatal(err)
							}
						}
					})
				}
				b.Run("limiter", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						for _, id := range ids {
							_ = l.Check(ctx, id)
						}
					}
				})
			})
		}
	}
}

// BenchmarkShouldRateLimitOptions answers a request of one descriptor that
// gives its check options (in process, the memory store): a hits_addend
// (the request's or the descriptor's) and a limit override, beside none.
func BenchmarkShouldRateLimitOptions(b *testing.B) {
	l := newLimiter(b, ratelimit.NewMemoryStore(), "", nil)
	svc, err := ratekitenvoy.NewService([]*ratelimit.Limiter{l}, ratekitenvoy.Options{Available: available(b)})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		set  func(*rlsv3.RateLimitRequest, *rlcommonv3.RateLimitDescriptor)
	}{
		{"none", func(*rlsv3.RateLimitRequest, *rlcommonv3.RateLimitDescriptor) {}},
		{"request_hits", func(r *rlsv3.RateLimitRequest, _ *rlcommonv3.RateLimitDescriptor) { r.HitsAddend = 2 }},
		{"descriptor_hits", func(_ *rlsv3.RateLimitRequest, d *rlcommonv3.RateLimitDescriptor) {
			d.HitsAddend = wrapperspb.UInt64(0)
		}},
		{"override", func(_ *rlsv3.RateLimitRequest, d *rlcommonv3.RateLimitDescriptor) {
			d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: typev3.RateLimitUnit_MINUTE}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			d := &rlcommonv3.RateLimitDescriptor{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.9.1.1"}}}
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}}
			c.set(req, d)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGRPC sends requests of 1 and 5 descriptors to the service on a
// real gRPC server on loopback (the memory store; the client's allocations
// count too), with gRPC's proto codec and with Codec, from 64 callers.
func BenchmarkGRPC(b *testing.B) {
	for _, n := range []int{1, 5} {
		for _, c := range []struct {
			name  string
			codec bool
		}{{"proto", false}, {"codec", true}} {
			b.Run(fmt.Sprintf("descriptors=%d/%s", n, c.name), func(b *testing.B) {
				l := newLimiter(b, ratelimit.NewMemoryStore(), "", nil)
				svc, err := ratekitenvoy.NewService([]*ratelimit.Limiter{l}, ratekitenvoy.Options{Available: available(b)})
				if err != nil {
					b.Fatal(err)
				}
				var opts []grpc.ServerOption
				if c.codec {
					opts = append(opts, grpc.ForceServerCodecV2(svc.Codec()))
				}
				srv := grpc.NewServer(opts...)
				svc.Register(srv)
				client := rlsv3.NewRateLimitServiceClient(serveGRPC(b, srv))
				req := &rlsv3.RateLimitRequest{Domain: "edge"}
				for i := range n {
					req.Descriptors = append(req.Descriptors, &rlcommonv3.RateLimitDescriptor{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.9.0." + strconv.Itoa(i)}}})
				}
				b.SetParallelism(32) // 32 callers per CPU: 64 on 2
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := client.ShouldRateLimit(context.Background(), req); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
