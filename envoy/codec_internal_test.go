package ratekitenvoy

import (
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func entries(kv ...string) *rlcommonv3.RateLimitDescriptor {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestDecodeRequest: the requests decodeRequest takes (what Envoy sends
// without overrides) decode as proto.Unmarshal decodes them, and the others
// are left to it.
func TestDecodeRequest(t *testing.T) {
	marshal := func(m proto.Message) string {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	over := entries("remote_address", "1.2.3.4")
	over.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND}
	hits := entries("remote_address", "1.2.3.4")
	hits.HitsAddend = wrapperspb.UInt64(2)
	req := marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{entries("a", "b")}})
	for _, tt := range []struct {
		name string
		wire string
		fast bool
	}{
		{"empty", "", true},
		{"one descriptor", req, true},
		{"five descriptors, hits", marshal(&rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*rlcommonv3.RateLimitDescriptor{
			entries("generic_key", "api", "user", "u"), entries("remote_address", "::1"), {}, entries("", ""), entries("path", "/é")}}), true},
		{"fields twice: the last domain, every descriptor", req + req + string(protowire.AppendTag(nil, 1, protowire.BytesType)) + "\x01z", true},
		{"hits_addend over 32 bits keeps the low ones", string(protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 1<<32+7)), true},
		{"limit override", marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{over}}), false},
		{"descriptor hits_addend", marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{hits}}), false},
		{"unknown field", req + string(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)), false},
		{"domain as a varint", string(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1)), false},
		{"invalid UTF-8 in a value", string(protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType),
			protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType),
				protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{0xff})))), false},
		{"truncated", req[:len(req)-1], false},
		{"length past the end", "\x0a\x05ab", false},
		{"field 0", "\x00\x00", false},
		{"varint of 11 bytes", "\x18" + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := &rlsv3.RateLimitRequest{}
			if fast := decodeRequest([]byte(tt.wire), got); fast != tt.fast {
				t.Fatalf("decodeRequest = %v, want %v", fast, tt.fast)
			}
			if !tt.fast {
				return
			}
			want := &rlsv3.RateLimitRequest{}
			if err := proto.Unmarshal([]byte(tt.wire), want); err != nil {
				t.Fatalf("decoded what proto.Unmarshal refuses: %v", err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("decoded %v, proto.Unmarshal %v", got, want)
			}
		})
	}
}

// FuzzDecodeRequest: whatever decodeRequest decodes, proto.Unmarshal
// decodes to the same message; what it refuses goes to proto.Unmarshal.
func FuzzDecodeRequest(f *testing.F) {
	for _, m := range []*rlsv3.RateLimitRequest{
		{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{entries("remote_address", "1.2.3.4")}},
		{Domain: "edge", HitsAddend: 3, Descriptors: []*rlcommonv3.RateLimitDescriptor{entries("generic_key", "api", "user", "u"), {}, entries("path", "/")}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := &rlsv3.RateLimitRequest{}
		if !decodeRequest(b, got) {
			return
		}
		want := &rlsv3.RateLimitRequest{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatalf("decoded %v, which proto.Unmarshal refuses: %v", got, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded %v, proto.Unmarshal %v", got, want)
		}
	})
}
