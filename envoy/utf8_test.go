package ratekitenvoy_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ratekitenvoy "github.com/ratekit/ratekit/envoy"
)

// wireCodec is a client codec that sends a request's wire bytes as they are,
// as Envoy's C++ protobuf does with a header value that is not UTF-8 (it
// logs and sends it: envoyproxy/envoy#22996), which Go's proto.Marshal
// refuses to produce.
type wireCodec struct{}

func (wireCodec) Name() string { return "proto" }

func (wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// wireDescriptor is a descriptor in the wire format: entries of key, value
// pairs, then extra (further descriptor fields, already encoded).
func wireDescriptor(extra []byte, kv ...string) []byte {
	var d []byte
	for i := 0; i+1 < len(kv); i += 2 {
		var e []byte
		e = protowire.AppendBytes(protowire.AppendTag(e, 1, protowire.BytesType), []byte(kv[i]))
		e = protowire.AppendBytes(protowire.AppendTag(e, 2, protowire.BytesType), []byte(kv[i+1]))
		d = protowire.AppendBytes(protowire.AppendTag(d, 1, protowire.BytesType), e)
	}
	return append(d, extra...)
}

// wireRateLimitRequest is a RateLimitRequest of domain and descriptors in the
// wire format.
func wireRateLimitRequest(domain string, descs ...[]byte) []byte {
	b := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte(domain))
	for _, d := range descs {
		b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), d)
	}
	return b
}

// A descriptor value that is not UTF-8 (a header a client sends in
// Latin-1, or any bytes) is a value like any other: counted, and blocked at
// its limit. Were the request refused, Envoy would let it through on the
// error (failure_mode_deny is off by default), every descriptor of it
// uncounted: one byte 0xff in a header would lift every limit.
func TestInvalidUTF8ValueIsCounted(t *testing.T) {
	g := redisGateway(t, ratekitenvoy.Options{})
	hits3 := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType),
		protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 3))
	// The entry user=François with a field 3, then a descriptor field 9.
	var later []byte
	later = protowire.AppendBytes(protowire.AppendTag(later, 1, protowire.BytesType), []byte("user"))
	later = protowire.AppendBytes(protowire.AppendTag(later, 2, protowire.BytesType), []byte("Fran\xe7ois"))
	later = protowire.AppendFixed32(protowire.AppendTag(later, 3, protowire.Fixed32Type), 7)
	later = protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), later)
	later = protowire.AppendVarint(protowire.AppendTag(later, 9, protowire.VarintType), 1)
	for i, tt := range []struct {
		name  string
		desc  []byte
		limit uint32
		rule  string
		until int // the request that is over the limit
	}{
		{"entries only", wireDescriptor(nil, "generic_key", "api", "user", "Espa\xf1a"), 3, "per_user_api", 4},
		{"descriptor hits_addend", wireDescriptor(hits3, "remote_address", "10.7.0.\xff"), 5, "per_ip", 2},
		// A field of a later Envoy, in the descriptor and in an entry, which
		// the service does not read: the value is still counted.
		{"fields of a later Envoy", wireDescriptor(later, "generic_key", "api"), 3, "per_user_api", 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Envoy sends the per_ip descriptor beside it: it must be counted
			// too, one client's per case.
			wire := wireRateLimitRequest("edge", tt.desc, wireDescriptor(nil, "remote_address", "10.7.1."+strconv.Itoa(i)))
			for n := 1; n <= tt.until; n++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp := &rlsv3.RateLimitResponse{}
				err := g.conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", wire, resp, grpc.ForceCodecV2(wireCodec{}))
				cancel()
				if err != nil {
					t.Fatalf("request %d: %v", n, err)
				}
				want := ok
				if n == tt.until {
					want = over
				}
				st := resp.GetStatuses()[0]
				if resp.GetOverallCode() != want || st.GetCode() != want || st.GetCurrentLimit().GetName() != tt.rule {
					t.Fatalf("request %d: %v, want %v by %s", n, resp, want, tt.rule)
				}
				if ip := resp.GetStatuses()[1]; ip.GetCurrentLimit().GetName() != "per_ip" {
					t.Fatalf("request %d: the other descriptor %v, want it counted by per_ip", n, ip)
				}
			}
		})
	}
}
