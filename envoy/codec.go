package ratekitenvoy

import (
	"unicode/utf8"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Codec returns gRPC's proto codec with a faster decoder for the usual
// RateLimitRequest: a domain, hits_addend and descriptors of entries, which
// is what Envoy sends unless a descriptor carries a limit override or its own
// hits_addend. It decodes such a request in five allocations (all strings
// share one copy of the message; the descriptors and entries are allocated
// together) where the generic decoder makes one per message and string: 50
// for five descriptors of two entries, and 1.6 times the time
// (BenchmarkCodec). Every other message, and any request
// holding another field, a wire type other than the declared one or invalid
// UTF-8, goes to the proto codec unchanged, so the result is always the
// message proto.Unmarshal makes (FuzzDecodeRequest compares them).
//
// Give it to the server that the Service is registered on:
//
//	gs := grpc.NewServer(grpc.ForceServerCodecV2(ratekitenvoy.Codec()))
//
// The strings of a decoded request point into one copy of the request, which
// stays in memory while any of them does.
func Codec() encoding.CodecV2 { return requestCodec{base: encoding.GetCodecV2(protocodec.Name)} }

type requestCodec struct{ base encoding.CodecV2 }

var _ encoding.CodecV2 = requestCodec{}

func (c requestCodec) Name() string { return c.base.Name() }

func (c requestCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if req, ok := v.(*rlsv3.RateLimitRequest); ok {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool()) // as the proto codec reads it
		decoded := decodeRequest(buf.ReadOnlyData(), req)
		buf.Free()
		if decoded {
			return nil
		}
		proto.Reset(req)
	}
	return c.base.Unmarshal(data, v)
}

// Field numbers of the messages decodeRequest reads
// (envoy/service/ratelimit/v3/rls.proto and
// envoy/extensions/common/ratelimit/v3/ratelimit.proto).
const (
	requestDomain      protowire.Number = 1 // string
	requestDescriptors protowire.Number = 2 // repeated RateLimitDescriptor
	requestHitsAddend  protowire.Number = 3 // uint32
	descriptorEntries  protowire.Number = 1 // repeated RateLimitDescriptor.Entry
	entryKey           protowire.Number = 1 // string
	entryValue         protowire.Number = 2 // string
)

// decodeRequest fills req, a zero message, from b, a RateLimitRequest in the
// wire format, and reports whether b held only the fields it reads, each with
// its declared wire type and valid UTF-8 in its strings. When it reports
// false, req may be partly filled. A first pass checks b and counts the
// descriptors and entries, so that the second allocates each kind once; the
// strings are slices of one copy of b.
func decodeRequest(b []byte, req *rlsv3.RateLimitRequest) bool {
	nd, ne, ok := countRequest(b)
	if !ok {
		return false
	}
	s := string(b)
	var descs []rlcommonv3.RateLimitDescriptor
	var entries []rlcommonv3.RateLimitDescriptor_Entry
	var entryPtrs []*rlcommonv3.RateLimitDescriptor_Entry
	if nd > 0 {
		descs = make([]rlcommonv3.RateLimitDescriptor, nd)
		req.Descriptors = make([]*rlcommonv3.RateLimitDescriptor, nd)
	}
	if ne > 0 {
		entries = make([]rlcommonv3.RateLimitDescriptor_Entry, ne)
		entryPtrs = make([]*rlcommonv3.RateLimitDescriptor_Entry, ne)
	}
	d, e := 0, 0
	for p := 0; p < len(b); {
		f, next, _ := readField(b, p)
		p = next
		switch f.num {
		case requestDomain:
			req.Domain = s[f.start:f.end]
		case requestHitsAddend:
			req.HitsAddend = uint32(f.value) // as proto: a uint32 field keeps the low 32 bits
		case requestDescriptors:
			desc := &descs[d]
			req.Descriptors[d] = desc
			d++
			first := e
			for q := f.start; q < f.end; {
				ef, next, _ := readField(b, q)
				q = next
				entry := &entries[e]
				entryPtrs[e] = entry
				e++
				for r := ef.start; r < ef.end; {
					kf, next, _ := readField(b, r)
					r = next
					if kf.num == entryKey {
						entry.Key = s[kf.start:kf.end]
					} else {
						entry.Value = s[kf.start:kf.end]
					}
				}
			}
			if e > first {
				desc.Entries = entryPtrs[first:e:e]
			}
		}
	}
	return true
}

// countRequest checks b as decodeRequest reads it and counts its
// descriptors and their entries.
func countRequest(b []byte) (descs, entries int, ok bool) {
	for p := 0; p < len(b); {
		f, next, ok := readField(b, p)
		if !ok {
			return 0, 0, false
		}
		p = next
		switch {
		case f.num == requestDomain && f.typ == protowire.BytesType:
			if !utf8.Valid(b[f.start:f.end]) {
				return 0, 0, false
			}
		case f.num == requestHitsAddend && f.typ == protowire.VarintType:
		case f.num == requestDescriptors && f.typ == protowire.BytesType:
			descs++
			for q := f.start; q < f.end; {
				ef, next, ok := readField(b[:f.end], q)
				if !ok || ef.num != descriptorEntries || ef.typ != protowire.BytesType {
					return 0, 0, false
				}
				q = next
				entries++
				for r := ef.start; r < ef.end; {
					kf, next, ok := readField(b[:ef.end], r)
					if !ok || (kf.num != entryKey && kf.num != entryValue) || kf.typ != protowire.BytesType ||
						!utf8.Valid(b[kf.start:kf.end]) {
						return 0, 0, false
					}
					r = next
				}
			}
		default:
			return 0, 0, false
		}
	}
	return descs, entries, true
}

// field is one field of a message in the wire format: its number, its wire
// type and either its value (a varint) or where its bytes are in the message.
type field struct {
	num        protowire.Number
	typ        protowire.Type
	value      uint64
	start, end int
}

// readField reads the field at b[p:], a varint or a length-delimited one
// within b (any other wire type is not ok), with protowire.
func readField(b []byte, p int) (f field, next int, ok bool) {
	num, typ, n := protowire.ConsumeTag(b[p:])
	if n < 0 {
		return f, 0, false
	}
	p += n
	f.num, f.typ = num, typ
	switch typ {
	case protowire.VarintType:
		if f.value, n = protowire.ConsumeVarint(b[p:]); n < 0 {
			return f, 0, false
		}
		return f, p + n, true
	case protowire.BytesType:
		v, n := protowire.ConsumeBytes(b[p:])
		if n < 0 {
			return f, 0, false
		}
		f.start, f.end = p+n-len(v), p+n
		return f, f.end, true
	}
	return f, 0, false
}
