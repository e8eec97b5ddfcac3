package ratekitenvoy

import (
	"strings"
	"unicode/utf8"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
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
		var b strings.Builder
		b.Grow(data.Len())
		for _, buf := range data {
			b.Write(buf.ReadOnlyData())
		}
		if decodeRequest(b.String(), req) {
			return nil
		}
		proto.Reset(req)
	}
	return c.base.Unmarshal(data, v)
}

// Wire types and field numbers of the messages decodeRequest reads
// (envoy/service/ratelimit/v3/rls.proto and
// envoy/extensions/common/ratelimit/v3/ratelimit.proto).
const (
	wireVarint = 0
	wireBytes  = 2

	requestDomain      = 1 // string
	requestDescriptors = 2 // repeated RateLimitDescriptor
	requestHitsAddend  = 3 // uint32
	descriptorEntries  = 1 // repeated RateLimitDescriptor.Entry
	entryKey           = 1 // string
	entryValue         = 2 // string
)

// decodeRequest fills req, a zero message, from s, a RateLimitRequest in the
// wire format, and reports whether s held only the fields it reads, each with
// its declared wire type and valid UTF-8 in its strings. When it reports
// false, req may be partly filled. A first pass checks s and counts the
// descriptors and entries, so that the second allocates each kind once.
func decodeRequest(s string, req *rlsv3.RateLimitRequest) bool {
	nd, ne, ok := countRequest(s)
	if !ok {
		return false
	}
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
	for p := 0; p < len(s); {
		f, next, _ := readField(s, p)
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
				ef, next, _ := readField(s, q)
				q = next
				entry := &entries[e]
				entryPtrs[e] = entry
				e++
				for r := ef.start; r < ef.end; {
					kf, next, _ := readField(s, r)
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

// countRequest checks s as decodeRequest reads it and counts its
// descriptors and their entries.
func countRequest(s string) (descs, entries int, ok bool) {
	for p := 0; p < len(s); {
		f, next, ok := readField(s, p)
		if !ok {
			return 0, 0, false
		}
		p = next
		switch {
		case f.num == requestDomain && f.wire == wireBytes:
			if !utf8.ValidString(s[f.start:f.end]) {
				return 0, 0, false
			}
		case f.num == requestHitsAddend && f.wire == wireVarint:
		case f.num == requestDescriptors && f.wire == wireBytes:
			descs++
			for q := f.start; q < f.end; {
				ef, next, ok := readField(s[:f.end], q)
				if !ok || ef.num != descriptorEntries || ef.wire != wireBytes {
					return 0, 0, false
				}
				q = next
				entries++
				for r := ef.start; r < ef.end; {
					kf, next, ok := readField(s[:ef.end], r)
					if !ok || (kf.num != entryKey && kf.num != entryValue) || kf.wire != wireBytes ||
						!utf8.ValidString(s[kf.start:kf.end]) {
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
	num, wire  uint64
	value      uint64
	start, end int
}

// readField reads the field at s[p:]: a varint or a length-delimited field
// (any other wire type is not ok), the length within s.
func readField(s string, p int) (f field, next int, ok bool) {
	tag, p, ok := readVarint(s, p)
	if !ok || tag>>3 == 0 || tag>>3 > 1<<29-1 {
		return f, 0, false
	}
	f.num, f.wire = tag>>3, tag&7
	switch f.wire {
	case wireVarint:
		f.value, p, ok = readVarint(s, p)
		return f, p, ok
	case wireBytes:
		var n uint64
		if n, p, ok = readVarint(s, p); !ok || n > uint64(len(s)-p) {
			return f, 0, false
		}
		f.start, f.end = p, p+int(n)
		return f, f.end, true
	}
	return f, 0, false
}

// readVarint reads the varint at s[p:], at most 10 bytes as the wire format
// allows, the tenth holding the top bit of the 64.
func readVarint(s string, p int) (v uint64, next int, ok bool) {
	for shift := uint(0); shift < 64; shift += 7 {
		if p >= len(s) {
			return 0, 0, false
		}
		b := s[p]
		p++
		if shift == 63 && b > 1 {
			return 0, 0, false
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, p, true
		}
	}
	return 0, 0, false
}
