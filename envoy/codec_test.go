package ratekitenvoy_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	ratekitenvoy "github.com/ratekit/ratekit/envoy"
)

func wireRequest(t testing.TB, n int) mem.BufferSlice {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: "edge"}
	for i := range n {
		req.Descriptors = append(req.Descriptors, &rlcommonv3.RateLimitDescriptor{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
			{Key: "generic_key", Value: "per_ip"}, {Key: "remote_address", Value: "10.9.0." + strconv.Itoa(i)}}})
	}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}
}

// TestCodecAllocations bounds the allocations of decoding a request of five
// descriptors of two entries each: the message's strings in one, its
// descriptors, their pointers, the entries and theirs (gRPC's proto codec
// makes one per message and string, about 50).
func TestCodecAllocations(t *testing.T) {
	data := wireRequest(t, 5)
	decode := func(c encoding.CodecV2) (*rlsv3.RateLimitRequest, float64) {
		var req rlsv3.RateLimitRequest
		return &req, testing.AllocsPerRun(100, func() {
			proto.Reset(&req)
			if err := c.Unmarshal(data, &req); err != nil {
				t.Fatal(err)
			}
		})
	}
	want, protoAllocs := decode(encoding.GetCodecV2("proto"))
	got, allocs := decode(ratekitenvoy.Codec())
	if !proto.Equal(got, want) || len(got.GetDescriptors()) != 5 {
		t.Fatalf("decoded %v, the proto codec %v", got, want)
	}
	if allocs > 6 {
		t.Errorf("%v allocations to decode 5 descriptors (the proto codec: %v), want at most 6", allocs, protoAllocs)
	}
}

// BenchmarkCodec decodes a request of 1 and 5 descriptors (two entries
// each) with gRPC's proto codec and with Codec.
func BenchmarkCodec(b *testing.B) {
	for _, n := range []int{1, 5} {
		data := wireRequest(b, n)
		for _, c := range []struct {
			name  string
			codec encoding.CodecV2
		}{{"proto", encoding.GetCodecV2("proto")}, {"ratekit", ratekitenvoy.Codec()}} {
			b.Run(strconv.Itoa(n)+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					var req rlsv3.RateLimitRequest
					if err := c.codec.Unmarshal(data, &req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestCodecServesEveryService: on a real server with the codec forced, the
// health service's messages, which the codec leaves to the proto codec, are
// answered. (Every gateway test runs with the codec, startGateway, requests
// with limit overrides included.)
func TestCodecServesEveryService(t *testing.T) {
	srv := grpc.NewServer(grpc.ForceServerCodecV2(ratekitenvoy.Codec()))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	conn := serveGRPC(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", resp, err)
	}
}
