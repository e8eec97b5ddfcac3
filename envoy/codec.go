package ratekitenvoy

import (
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Codec returns gRPC's proto codec with its own decoder for
// RateLimitRequest. It decodes Envoy's usual request (a domain, hits_addend
// and descriptors of entries) in five allocations (all strings share one copy
// of the message; the descriptors and entries are allocated together) where
// the generic decoder makes one per message and string: 50 for five
// descriptors of two entries, and 1.6 times the time (BenchmarkCodec). A
// descriptor's limit override, hits_addend and is_negative_hits are decoded
// too, at one allocation per message.
//
// Its strings are taken as the bytes Envoy sent, UTF-8 or not. Envoy sends a
// header value that is not UTF-8 (a client's Latin-1, any bytes) as it is,
// and the proto codec refuses the whole request for it (INTERNAL), which
// Envoy, unless failure_mode_deny is set, lets through with none of its
// descriptors counted: one byte 0xff in a header would lift every limit.
// Here such a value is a value like any other (keys must still be identifier
// properties). A field of another number, or of a wire type other than the
// declared one (a field of a later Envoy), is dropped, where proto.Unmarshal
// keeps it as an unknown field that the Service never reads: such a request
// is decoded here too, so that its values need not be UTF-8 either. Every
// other message, and a request that is malformed, goes to the proto codec
// unchanged; what Codec decodes is the message proto.Unmarshal makes, but
// for the UTF-8 check and the unknown fields (FuzzDecodeRequest compares
// them).
//
// It refuses a request with more descriptors than the Service's
// MaxDescriptors, or a descriptor with more entries than MaxEntries, before
// decoding anything (also when they are followed by a malformed field, up to
// which the proto codec would decode them all), with the error the Service
// gives it, counted as an
// invalid request in the Service's metrics; gRPC answers an error of a codec
// as INTERNAL, which Envoy takes as it takes INVALID_ARGUMENT. A descriptor
// takes 2 bytes on the wire and about 100 in memory, so that a request of
// 1 MiB would otherwise become some 50 MiB before the Service counted its
// descriptors.
//
// Give it to the server that the Service is registered on:
//
//	gs := grpc.NewServer(grpc.ForceServerCodecV2(svc.Codec()))
//
// The strings of a decoded request point into one copy of the request, which
// stays in memory while any of them does.
func (s *Service) Codec() encoding.CodecV2 {
	return requestCodec{base: encoding.GetCodecV2(protocodec.Name), svc: s}
}

type requestCodec struct {
	base encoding.CodecV2
	svc  *Service
}

var _ encoding.CodecV2 = requestCodec{}

func (c requestCodec) Name() string { return c.base.Name() }

func (c requestCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if req, ok := v.(*rlsv3.RateLimitRequest); ok {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool()) // as the proto codec reads it
		b := buf.ReadOnlyData()
		sc := scanRequest(b, c.svc.maxEnt)
		if err := c.svc.checkScan(&sc); err != nil {
			c.svc.seriesOf(string(sc.domain)).request(codeInvalid)
			buf.Free()
			return err
		}
		if sc.decodable {
			decodeRequest(b, &sc, req)
			buf.Free()
			return nil
		}
		buf.Free()
	}
	return c.base.Unmarshal(data, v)
}

// Field numbers of the messages decodeRequest reads
// (envoy/service/ratelimit/v3/rls.proto,
// envoy/extensions/common/ratelimit/v3/ratelimit.proto and the wrappers).
const (
	requestDomain      protowire.Number = 1 // string
	requestDescriptors protowire.Number = 2 // repeated RateLimitDescriptor
	requestHitsAddend  protowire.Number = 3 // uint32
	descriptorEntries  protowire.Number = 1 // repeated RateLimitDescriptor.Entry
	descriptorLimit    protowire.Number = 2 // RateLimitOverride
	descriptorHits     protowire.Number = 3 // google.protobuf.UInt64Value
	descriptorNegative protowire.Number = 4 // bool
	entryKey           protowire.Number = 1 // string
	entryValue         protowire.Number = 2 // string
	overrideRequests   protowire.Number = 1 // uint32
	overrideUnit       protowire.Number = 2 // envoy.type.v3.RateLimitUnit
	overrideMultiplier protowire.Number = 3 // google.protobuf.UInt32Value
	wrapperValue       protowire.Number = 1 // uint32 or uint64
)

// decodeRequest fills req, a zero message, from b, a RateLimitRequest in the
// wire format whose scan, sc, found it decodable. It allocates the
// descriptors and the entries the scan counted once each; the strings are
// slices of one copy of b. A message field given twice is merged, as
// proto.Unmarshal does.
func decodeRequest(b []byte, sc *scan, req *rlsv3.RateLimitRequest) {
	nd, ne := sc.descs, sc.entries
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
		f, next, _ := skipField(b, p)
		p = next
		switch {
		case f.is(requestDomain, protowire.BytesType):
			req.Domain = s[f.start:f.end]
		case f.is(requestHitsAddend, protowire.VarintType):
			req.HitsAddend = uint32(f.value) // as proto: a uint32 field keeps the low 32 bits
		case f.is(requestDescriptors, protowire.BytesType):
			desc := &descs[d]
			req.Descriptors[d] = desc
			d++
			first := e
			for q := f.start; q < f.end; {
				df, next, _ := skipField(b, q)
				q = next
				switch {
				case df.is(descriptorEntries, protowire.BytesType):
					entry := &entries[e]
					entryPtrs[e] = entry
					e++
					for r := df.start; r < df.end; {
						kf, next, _ := skipField(b, r)
						r = next
						switch {
						case kf.is(entryKey, protowire.BytesType):
							entry.Key = s[kf.start:kf.end]
						case kf.is(entryValue, protowire.BytesType):
							entry.Value = s[kf.start:kf.end]
						}
					}
				case df.is(descriptorLimit, protowire.BytesType):
					if desc.Limit == nil {
						desc.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{}
					}
					decodeOverride(b[:df.end], df.start, desc.Limit)
				case df.is(descriptorHits, protowire.BytesType):
					if desc.HitsAddend == nil {
						desc.HitsAddend = &wrapperspb.UInt64Value{}
					}
					decodeWrapper(b[:df.end], df.start, &desc.HitsAddend.Value)
				case df.is(descriptorNegative, protowire.VarintType):
					desc.IsNegativeHits = df.value != 0
				}
			}
			if e > first {
				desc.Entries = entryPtrs[first:e:e]
			}
		}
	}
}

// decodeOverride fills o from the RateLimitOverride at b[p:], which
// scanRequest checked.
func decodeOverride(b []byte, p int, o *rlcommonv3.RateLimitDescriptor_RateLimitOverride) {
	for p < len(b) {
		f, next, _ := skipField(b, p)
		p = next
		switch {
		case f.is(overrideRequests, protowire.VarintType):
			o.RequestsPerUnit = uint32(f.value)
		case f.is(overrideUnit, protowire.VarintType):
			o.Unit = typev3.RateLimitUnit(int32(f.value)) // as proto: an enum keeps the low 32 bits
		case f.is(overrideMultiplier, protowire.BytesType):
			if o.UnitMultiplier == nil {
				o.UnitMultiplier = &wrapperspb.UInt32Value{}
			}
			var v uint64
			if decodeWrapper(b[:f.end], f.start, &v) {
				o.UnitMultiplier.Value = uint32(v) // as proto: a uint32 field keeps the low 32 bits
			}
		}
	}
}

// decodeWrapper sets *v to the value of the UInt64Value or UInt32Value at
// b[p:], which scanRequest checked, when it holds one, and reports whether
// it does.
func decodeWrapper(b []byte, p int, v *uint64) (set bool) {
	for p < len(b) {
		f, next, _ := skipField(b, p)
		p = next
		if f.is(wrapperValue, protowire.VarintType) {
			*v, set = f.value, true
		}
	}
	return set
}

// scan is what one walk over a RateLimitRequest in the wire format finds.
type scan struct {
	domain    []byte // the last domain
	descs     int    // descriptors
	entries   int    // entries, of every descriptor
	overAt    int    // the first descriptor with more entries than the walk's bound, or -1
	overN     int    // its entries
	decodable bool   // b is well-formed, as proto.Unmarshal reads it: decodeRequest decodes it
}

// scanRequest walks b, a RateLimitRequest in the wire format, once: it
// counts the descriptors and their entries, finds the first descriptor with
// more than maxEnt entries, and checks that decodeRequest can decode b: that
// b and the messages proto.Unmarshal would decode in it are well-formed.
// Fields of other numbers or wire types, which proto.Unmarshal keeps as
// unknown fields, are passed over: the service reads none, and decodeRequest
// drops them. A b that is malformed is not decodable, left to the proto
// codec to refuse, and its scan counts what comes before the malformed field
// (in the descriptor that holds it too): the proto codec decodes all that
// before it refuses b, so the bounds hold for it as well.
func scanRequest(b []byte, maxEnt int) scan {
	sc := scan{overAt: -1, decodable: true}
	for p := 0; p < len(b); {
		f, next, ok := skipField(b, p)
		if !ok {
			sc.decodable = false
			return sc
		}
		p = next
		switch {
		case f.is(requestDomain, protowire.BytesType):
			sc.domain = b[f.start:f.end]
		case f.is(requestDescriptors, protowire.BytesType):
			n, ok := scanDescriptor(b[:f.end], f.start)
			if n > maxEnt && sc.overAt < 0 {
				sc.overAt, sc.overN = sc.descs, n
			}
			sc.descs++
			sc.entries += n
			if !ok {
				sc.decodable = false
				return sc
			}
		}
	}
	return sc
}

// scanDescriptor counts the entries of the RateLimitDescriptor at b[p:]; ok
// is false when it is malformed, and entries then counts those before the
// malformed field.
func scanDescriptor(b []byte, p int) (entries int, ok bool) {
	for p < len(b) {
		f, next, ok := skipField(b, p)
		if !ok {
			return entries, false
		}
		p = next
		switch {
		case f.is(descriptorEntries, protowire.BytesType):
			entries++
			if !wellFormed(b[:f.end], f.start) {
				return entries, false
			}
		case f.is(descriptorLimit, protowire.BytesType):
			if !checkOverride(b[:f.end], f.start) {
				return entries, false
			}
		case f.is(descriptorHits, protowire.BytesType):
			if !wellFormed(b[:f.end], f.start) {
				return entries, false
			}
		}
	}
	return entries, true
}

// checkScan returns the Service's error for a request whose scan found more
// descriptors than MaxDescriptors (the first problem, as parse finds it) or
// a descriptor with more entries than MaxEntries, or nil.
func (s *Service) checkScan(sc *scan) error {
	switch {
	case sc.descs > s.maxDesc:
		return s.checkCount(sc.descs)
	case sc.overAt >= 0:
		return s.tooManyEntries(descAt(sc.overAt), sc.overN)
	}
	return nil
}

// checkOverride reports whether the RateLimitOverride at b[p:] is
// well-formed, its unit_multiplier too.
func checkOverride(b []byte, p int) bool {
	for p < len(b) {
		f, next, ok := skipField(b, p)
		if !ok || f.is(overrideMultiplier, protowire.BytesType) && !wellFormed(b[:f.end], f.start) {
			return false
		}
		p = next
	}
	return true
}

// wellFormed reports whether the message at b[p:] is a sequence of fields,
// whatever they are.
func wellFormed(b []byte, p int) bool {
	for p < len(b) {
		_, next, ok := skipField(b, p)
		if !ok {
			return false
		}
		p = next
	}
	return true
}

// field is one field of a message in the wire format: its number, its wire
// type and either its value (a varint) or where its bytes are in the message.
type field struct {
	num        protowire.Number
	typ        protowire.Type
	value      uint64
	start, end int
}

// is reports whether f is the field numbered num of wire type typ.
func (f *field) is(num protowire.Number, typ protowire.Type) bool {
	return f.num == num && f.typ == typ
}

// readField reads the field at b[p:], a varint or a length-delimited one
// within b (any other wire type is not ok), with protowire.
func readField(b []byte, p int) (f field, next int, ok bool) {
	num, typ, n := protowire.ConsumeTag(b[p:])
	if n < 0 || !num.IsValid() { // proto.Unmarshal refuses numbers over MaxValidNumber, which ConsumeTag takes
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

// skipField is readField for a field of any wire type: one that is neither
// varint nor length-delimited is passed over, its value unread.
func skipField(b []byte, p int) (f field, next int, ok bool) {
	if f, next, ok = readField(b, p); ok {
		return f, next, true
	}
	num, typ, n := protowire.ConsumeTag(b[p:])
	if n < 0 || !num.IsValid() {
		return f, 0, false
	}
	m := protowire.ConsumeFieldValue(num, typ, b[p+n:])
	if m < 0 {
		return f, 0, false
	}
	return field{num: num, typ: typ}, p + n + m, true
}
