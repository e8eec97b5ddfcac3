package ratekitenvoy_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ratelimit "github.com/ratekit/ratekit/core"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
)

// newCodec is the Codec of a Service with the default bounds.
func newCodec(t testing.TB) encoding.CodecV2 {
	t.Helper()
	l := newLimiter(t, ratelimit.NewMemoryStore(), "", nil)
	svc, err := ratekitenvoy.NewService([]*ratelimit.Limiter{l}, ratekitenvoy.Options{Available: available(t)})
	if err != nil {
		t.Fatal(err)
	}
	return svc.Codec()
}

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
	got, allocs := decode(newCodec(t))
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
		}{{"proto", encoding.GetCodecV2("proto")}, {"ratekit", newCodec(b)}} {
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
	srv := grpc.NewServer(grpc.ForceServerCodecV2(newCodec(t)))
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

// tail is where a request of TestCodecRefusesTooManyBeforeDecoding is
// malformed, if it is.
type tail int

const (
	none         tail = iota
	inRequest         // after its last descriptor
	inDescriptor      // after the entries of each descriptor
)

// TestCodecRefusesTooManyBeforeDecoding: a request of more descriptors than
// MaxDescriptors, or of a descriptor with more entries than MaxEntries, is
// refused with the Service's error before anything is decoded, also when it
// holds a field of a later Envoy or is malformed after them: 1 MiB of empty
// descriptors used to become some 50 MiB of messages first. A request at the
// bounds is decoded.
func TestCodecRefusesTooManyBeforeDecoding(t *testing.T) {
	l := newLimiter(t, ratelimit.NewMemoryStore(), "", nil)
	svc, err := ratekitenvoy.NewService([]*ratelimit.Limiter{l}, ratekitenvoy.Options{Available: available(t), MaxDescriptors: 4, MaxEntries: 3})
	if err != nil {
		t.Fatal(err)
	}
	codec := svc.Codec()
	desc := func(entries int) []byte {
		var d []byte
		for range entries {
			d = protowire.AppendTag(d, 1, protowire.BytesType)
			d = protowire.AppendBytes(d, nil)
		}
		return d
	}
	// A tag of field number 0, which no message may hold: the proto codec
	// decodes all that comes before it, then refuses the request.
	malformed := []byte{0}
	request := func(descs, entries int, unknown bool, tail tail) []byte {
		var b []byte
		if unknown { // a field of a later Envoy, which the codec drops
			b = protowire.AppendTag(b, 99, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, 7)
		}
		for range descs {
			d := desc(entries)
			if tail == inDescriptor {
				d = append(d, malformed...)
			}
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendBytes(b, d)
		}
		if tail == inRequest {
			b = append(b, malformed...)
		}
		return b
	}
	for _, tt := range []struct {
		name           string
		descs, entries int
		unknown        bool
		tail           tail
		want           string // "" decoded
	}{
		{"at the bounds", 4, 3, false, none, ""},
		{"at the bounds, a field of a later Envoy", 4, 3, true, none, ""},
		{"descriptors", 5, 1, false, none, "5 descriptors, over the limit of 4"},
		{"entries", 2, 4, false, none, "descriptor #0 has 4 entries, over the limit of 3"},
		{"descriptors, a field of a later Envoy", 500000, 0, true, none, "500000 descriptors, over the limit of 4"},
		{"entries, a field of a later Envoy", 1, 500000, true, none, "descriptor #0 has 500000 entries, over the limit of 3"},
		// What comes before a malformed field is counted as the proto codec
		// would decode it: it decoded them all before refusing the request.
		{"descriptors, malformed", 500000, 0, false, inRequest, "500000 descriptors, over the limit of 4"},
		{"entries, malformed descriptor", 1, 500000, false, inDescriptor, "descriptor #0 has 500000 entries, over the limit of 3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wire := request(tt.descs, tt.entries, tt.unknown, tt.tail)
			var req rlsv3.RateLimitRequest
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &req)
			runtime.ReadMemStats(&after)
			if tt.want == "" {
				if err != nil || len(req.GetDescriptors()) != tt.descs {
					t.Fatalf("Unmarshal: %v, %d descriptors, want %d", err, len(req.GetDescriptors()), tt.descs)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Unmarshal: %v, want %q", err, tt.want)
			}
			// A copy of the request, and little else: decoding 1 MiB of
			// them took about 50 MiB.
			if n := after.TotalAlloc - before.TotalAlloc; len(req.GetDescriptors()) != 0 || n > uint64(4*len(wire)+1<<20) {
				t.Errorf("refused after decoding: %d descriptors, %d bytes allocated for a request of %d", len(req.GetDescriptors()), n, len(wire))
			}
		})
	}
}
