package ratekitenvoy

import (
	"math"
	"strings"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func entries(kv ...string) *rlcommonv3.RateLimitDescriptor {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// decode is the codec's fast path: it fills req, a zero message, from b
// and reports whether scanRequest found b decodable.
func decode(b []byte, req *rlsv3.RateLimitRequest) bool {
	sc := scanRequest(b, math.MaxInt)
	if !sc.decodable {
		return false
	}
	decodeRequest(b, &sc, req)
	return true
}

// TestDecodeRequest: the requests decodeRequest takes (every field of a
// RateLimitRequest) decode as proto.Unmarshal decodes them, strings that are
// not UTF-8 included (which proto.Unmarshal refuses), and the others are left
// to it.
func TestDecodeRequest(t *testing.T) {
	marshal := func(m proto.Message) string {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	over := entries("remote_address", "1.2.3.4")
	over.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(30)}
	hits := entries("remote_address", "1.2.3.4")
	hits.HitsAddend = wrapperspb.UInt64(2)
	all := entries("user", "u")
	all.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(0)}
	all.HitsAddend, all.IsNegativeHits = wrapperspb.UInt64(0), true
	req := marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{entries("a", "b")}})
	// bytesField is a length-delimited field; varintField a varint one.
	bytesField := func(n protowire.Number, v string) string {
		return string(protowire.AppendBytes(protowire.AppendTag(nil, n, protowire.BytesType), []byte(v)))
	}
	varintField := func(n protowire.Number, v uint64) string {
		return string(protowire.AppendVarint(protowire.AppendTag(nil, n, protowire.VarintType), v))
	}
	for _, tt := range []struct {
		name string
		wire string
		fast bool
		want *rlsv3.RateLimitRequest // when proto.Unmarshal refuses wire
	}{
		{"empty", "", true, nil},
		{"one descriptor", req, true, nil},
		{"five descriptors, hits", marshal(&rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*rlcommonv3.RateLimitDescriptor{
			entries("generic_key", "api", "user", "u"), entries("remote_address", "::1"), {}, entries("", ""), entries("path", "/é")}}), true, nil},
		{"fields twice: the last domain, every descriptor", req + req + bytesField(1, "z"), true, nil},
		{"hits_addend over 32 bits keeps the low ones", varintField(3, 1<<32+7), true, nil},
		{"limit override", marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{over}}), true, nil},
		{"descriptor hits_addend", marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{hits}}), true, nil},
		{"every descriptor field, zero values set", marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{all, over, hits}}), true, nil},
		{"override and hits_addend twice: merged", bytesField(2,
			bytesField(2, varintField(1, 7)+bytesField(3, varintField(1, 2)))+bytesField(3, varintField(1, 5))+
				bytesField(2, varintField(2, 2)+bytesField(3, ""))+bytesField(3, "")+varintField(4, 1)+varintField(4, 0)), true, nil},
		{"unit and multiplier over 32 bits keep the low ones", bytesField(2, bytesField(2, varintField(2, 1<<32+3)+bytesField(3, varintField(1, 1<<32+9)))), true, nil},
		{"invalid UTF-8 in a value", bytesField(2, bytesField(1, bytesField(2, "\xff"))), true,
			&rlsv3.RateLimitRequest{Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Value: "\xff"}}}}}},
		{"invalid UTF-8 in the domain and a key", bytesField(1, "ed\xe9") + bytesField(2, bytesField(1, bytesField(1, "k\xc3"))+varintField(4, 1)), true,
			&rlsv3.RateLimitRequest{Domain: "ed\xe9", Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "k\xc3"}}, IsNegativeHits: true}}}},
		// Fields of other numbers or wire types are dropped (proto.Unmarshal
		// keeps them as unknown fields), in every message.
		{"unknown field", req + varintField(99, 1) + "\x1d\x01\x02\x03\x04" + "\x23\x08\x01\x24", true, nil},
		{"unknown descriptor field", bytesField(2, varintField(5, 1)+bytesField(1, bytesField(2, "v")+bytesField(3, "x"))), true, nil},
		{"unknown override field", bytesField(2, bytesField(2, varintField(4, 1)+varintField(1, 3))), true, nil},
		{"unknown wrapper field", bytesField(2, bytesField(3, varintField(2, 1))+bytesField(2, bytesField(3, varintField(2, 1)))), true, nil},
		{"domain as a varint", varintField(1, 1), true, nil},
		{"is_negative_hits as bytes", bytesField(2, bytesField(4, "")), true, nil},
		{"multiplier as a varint", bytesField(2, bytesField(2, varintField(3, 1))), true, nil},
		{"entries as a varint", bytesField(2, varintField(1, 1)), true, nil},
		{"invalid UTF-8 and an unknown field", bytesField(2, bytesField(1, bytesField(2, "\xff")+varintField(3, 1))), true,
			&rlsv3.RateLimitRequest{Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Value: "\xff"}}}}}},
		{"malformed unknown field", req + "\x23\x08\x01", false, nil},
		{"field number over MaxValidNumber", req + "\x80\x80\x80\x80\x10\x00", false, nil},
		{"malformed entry", bytesField(2, bytesField(1, "\x0a\x05ab")), false, nil},
		{"malformed wrapper", bytesField(2, bytesField(3, "\x08")), false, nil},
		{"malformed multiplier", bytesField(2, bytesField(2, bytesField(3, "\x08"))), false, nil},
		{"truncated", req[:len(req)-1], false, nil},
		{"truncated override", bytesField(2, bytesField(2, "\x08")), false, nil},
		{"length past the end", "\x0a\x05ab", false, nil},
		{"field 0", "\x00\x00", false, nil},
		{"varint of 11 bytes", "\x18" + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", false, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := &rlsv3.RateLimitRequest{}
			if fast := decode([]byte(tt.wire), got); fast != tt.fast {
				t.Fatalf("decode = %v, want %v", fast, tt.fast)
			}
			if !tt.fast { // malformed: the proto codec refuses it
				if err := proto.Unmarshal([]byte(tt.wire), &rlsv3.RateLimitRequest{}); err == nil {
					t.Fatal("proto.Unmarshal takes it")
				}
				return
			}
			want := tt.want
			if want == nil {
				want = &rlsv3.RateLimitRequest{}
				if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(tt.wire), want); err != nil {
					t.Fatalf("proto.Unmarshal: %v", err)
				}
			} else if err := proto.Unmarshal([]byte(tt.wire), &rlsv3.RateLimitRequest{}); err == nil || !strings.Contains(err.Error(), "invalid UTF-8") {
				t.Fatalf("proto.Unmarshal: %v, want it to refuse invalid UTF-8 (else compare with its message)", err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("decoded %v, want %v", got, want)
			}
		})
	}
}

// FuzzDecodeRequest: whatever decodeRequest decodes, proto.Unmarshal
// decodes to the same message but for the unknown fields, which
// decodeRequest drops, or refuses for a string that is not UTF-8; what it
// refuses, proto.Unmarshal refuses too.
func FuzzDecodeRequest(f *testing.F) {
	for _, m := range []*rlsv3.RateLimitRequest{
		{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{entries("remote_address", "1.2.3.4")}},
		{Domain: "edge", HitsAddend: 3, Descriptors: []*rlcommonv3.RateLimitDescriptor{entries("generic_key", "api", "user", "u"), {}, entries("path", "/")}},
		{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
			Entries:    []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
			Limit:      &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(5)},
			HitsAddend: wrapperspb.UInt64(3), IsNegativeHits: true,
		}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// A value that is not UTF-8, as Envoy sends a header in Latin-1.
	f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType),
		protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType),
			protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte("Espa\xf1a")))))
	f.Fuzz(func(t *testing.T, b []byte) {
		got := &rlsv3.RateLimitRequest{}
		if !decode(b, got) {
			if proto.Unmarshal(b, &rlsv3.RateLimitRequest{}) == nil {
				t.Fatalf("not decoded, but proto.Unmarshal takes it")
			}
			return
		}
		discard := proto.UnmarshalOptions{DiscardUnknown: true}
		want := &rlsv3.RateLimitRequest{}
		if err := discard.Unmarshal(b, want); err != nil {
			// Only for a string that is not UTF-8, which decodeRequest takes
			// as it is: the same schema with bytes for strings decodes b.
			wantBytes := dynamicpb.NewMessage(requestBytes)
			if !strings.Contains(err.Error(), "invalid UTF-8") || discard.Unmarshal(b, wantBytes) != nil {
				t.Fatalf("decoded %v, which proto.Unmarshal refuses: %v", got, err)
			}
			if gotBytes := asBytesSchema(t, got); !proto.Equal(gotBytes, wantBytes) {
				t.Fatalf("decoded %v, proto.Unmarshal with bytes for strings %v", gotBytes, wantBytes)
			}
			return
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded %v, proto.Unmarshal %v", got, want)
		}
	})
}

// requestBytes is RateLimitRequest with bytes for every string field.
var requestBytes = func() protoreflect.MessageDescriptor {
	reg := new(protoregistry.Files)
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if _, err := reg.FindFileByPath(fd.Path()); err == nil {
			return
		}
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		if fd.Path() == "envoy/extensions/common/ratelimit/v3/ratelimit.proto" || fd.Path() == "envoy/service/ratelimit/v3/rls.proto" {
			fdp := protodesc.ToFileDescriptorProto(fd)
			var bytesFields func(m *descriptorpb.DescriptorProto)
			bytesFields = func(m *descriptorpb.DescriptorProto) {
				for _, f := range m.GetField() {
					if f.GetType() == descriptorpb.FieldDescriptorProto_TYPE_STRING {
						f.Type = descriptorpb.FieldDescriptorProto_TYPE_BYTES.Enum()
					}
				}
				for _, n := range m.GetNestedType() {
					bytesFields(n)
				}
			}
			for _, m := range fdp.GetMessageType() {
				bytesFields(m)
			}
			var err error
			if fd, err = protodesc.NewFile(fdp, reg); err != nil {
				panic(err)
			}
		}
		if err := reg.RegisterFile(fd); err != nil {
			panic(err)
		}
	}
	add((&rlsv3.RateLimitRequest{}).ProtoReflect().Descriptor().ParentFile())
	d, err := reg.FindDescriptorByName("envoy.service.ratelimit.v3.RateLimitRequest")
	if err != nil {
		panic(err)
	}
	return d.(protoreflect.MessageDescriptor)
}()

// asBytesSchema returns req as a message of requestBytes.
func asBytesSchema(t *testing.T, req *rlsv3.RateLimitRequest) proto.Message {
	t.Helper()
	m := dynamicpb.NewMessage(requestBytes)
	fields := requestBytes.Fields()
	if req.Domain != "" {
		m.Set(fields.ByName("domain"), protoreflect.ValueOfBytes([]byte(req.Domain)))
	}
	if req.HitsAddend != 0 {
		m.Set(fields.ByName("hits_addend"), protoreflect.ValueOfUint32(req.HitsAddend))
	}
	list := m.Mutable(fields.ByName("descriptors")).List()
	for _, d := range req.Descriptors {
		dm := list.NewElement().Message()
		entries := dm.Mutable(dm.Descriptor().Fields().ByName("entries")).List()
		for _, e := range d.Entries {
			em := entries.NewElement().Message()
			if e.Key != "" {
				em.Set(em.Descriptor().Fields().ByName("key"), protoreflect.ValueOfBytes([]byte(e.Key)))
			}
			if e.Value != "" {
				em.Set(em.Descriptor().Fields().ByName("value"), protoreflect.ValueOfBytes([]byte(e.Value)))
			}
			entries.Append(protoreflect.ValueOfMessage(em))
		}
		// The other fields hold no strings: the same wire in either schema.
		rest := proto.Clone(d).(*rlcommonv3.RateLimitDescriptor)
		rest.Entries = nil
		b, err := proto.Marshal(rest)
		if err != nil {
			t.Fatal(err)
		}
		if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(b, dm.Interface()); err != nil {
			t.Fatal(err)
		}
		list.Append(protoreflect.ValueOfMessage(dm))
	}
	return m
}
