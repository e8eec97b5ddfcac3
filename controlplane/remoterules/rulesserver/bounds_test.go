package rulesserver_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"buf.build/go/protovalidate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesserver"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// The rules service enforces the bounds of the rules model (docs/limits.md)
// on the documents it is given and on those it reads back.
func TestOverrideDocumentBounds(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	s, err := rulesserver.New(rulesserver.Config{Redis: rdb, KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if rulesserver.MaxDocumentBytes != ratelimit.MaxDocumentBytes {
		t.Fatalf("MaxDocumentBytes %d, the model's %d", rulesserver.MaxDocumentBytes, ratelimit.MaxDocumentBytes)
	}
	ctx := context.Background()
	withChars := func(n int) *rulesv1.OverrideDocument {
		d := mustDoc(t, docJSON)
		r := d.DefaultRules.Rules[0]
		for i := len(r.Characteristics); i < n; i++ {
			r.Characteristics = append(r.Characteristics, fmt.Sprintf("p%d", i))
		}
		return d
	}
	if _, err := s.Put(ctx, withChars(ratelimit.MaxCharacteristics)); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	over := withChars(ratelimit.MaxCharacteristics + 1)
	if _, err := s.Put(ctx, over); err == nil || !strings.Contains(err.Error(), "17 characteristics, at most 16") {
		t.Fatalf("over the bound: %v", err)
	}
	// Written past the server (by hand): refused on read, clients fail open.
	body, err := proto.Marshal(over)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, prefix+"web:rack_request", "body", string(body)).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("stored document over the bound: %v, want Unavailable", err)
	}
}

// The properties a document's selectors use are the vary list of its
// answers, which the protocol bounds (GetRulesResponse.vary, at most 16) and
// every client enforces: a document past it is refused on write, on read
// and in an apply file, never stored to make answers no client accepts.
func TestSelectorPropertiesBounded(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	s, err := rulesserver.New(rulesserver.Config{Redis: rdb, KeyPrefix: prefix, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	withProps := func(n int) *rulesv1.OverrideDocument {
		d := mustDoc(t, docJSON)
		d.Overrides = nil
		for i := range n {
			d.Overrides = append(d.Overrides, &rulesv1.Override{
				Selector: map[string]string{fmt.Sprintf("p%d", i): "x"},
				Rules:    d.DefaultRules,
			})
		}
		return d
	}
	if _, err := s.Put(ctx, withProps(rulesserver.MaxSelectorProperties)); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	resp, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"})
	if err != nil {
		t.Fatal(err)
	}
	if err := protovalidate.Validate(resp); err != nil {
		t.Fatalf("the answer at the bound breaks the protocol: %v", err)
	}
	over := withProps(rulesserver.MaxSelectorProperties + 1)
	var ve *config.ValidationError
	if _, err := s.Put(ctx, over); !errors.As(err, &ve) || !strings.Contains(err.Error(), "17 distinct properties, at most 16") {
		t.Fatalf("over the bound: %v, want a ValidationError naming the count", err)
	}
	// Written past the server (by hand): refused on read, clients fail open.
	body, err := proto.Marshal(over)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, prefix+"web:rack_request", "rev", "9-hand", "body", string(body)).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("stored document over the bound: %v, want Unavailable", err)
	}
	file := "documents:\n  - service: web\n    limiter: rack_request\n    overrides:\n"
	for i := range rulesserver.MaxSelectorProperties + 1 {
		file += fmt.Sprintf("      - selector: {p%d: x}\n", i)
	}
	if _, err := rulesserver.ParseOverrideFile("o.yaml", []byte(file), nil); err == nil || !strings.Contains(err.Error(), "o.yaml: documents[0]") || !strings.Contains(err.Error(), "17 distinct properties") {
		t.Fatalf("apply file over the bound: %v", err)
	}
}

// Apply reads the whole answer to a PUT the server took: the stored
// document comes back with its revision, a few bytes more than the body
// sent, so a body just under MaxDocumentBytes got an answer just over it.
// Apply read the answer up to MaxDocumentBytes and failed to decode it,
// reporting a document the server had stored as not applied.
func TestApplyReadsTheAnswerToABodyAtTheBound(t *testing.T) {
	m := newManaged(t, rulesserver.Config{}, nil)
	doc := mustDoc(t, docJSON)
	for i := range 1010 {
		doc.Overrides = append(doc.Overrides, &rulesv1.Override{
			Selector:    map[string]string{"plan": fmt.Sprintf("p%d", i)},
			Description: strings.Repeat("d", 900),
		})
	}
	// Longer descriptions fill the body Apply sends to 8 bytes under the
	// bound (protojson's spacing varies by binary: measured, not assumed).
	marshal := protojson.MarshalOptions{UseProtoNames: true}.Marshal
	body, err := marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	rem := rulesserver.MaxDocumentBytes - 8 - len(body)
	for _, o := range doc.Overrides[3:] {
		add := min(rem, 1024-len(o.Description))
		o.Description += strings.Repeat("d", add)
		rem -= add
	}
	if body, err = marshal(doc); err != nil || len(body) != rulesserver.MaxDocumentBytes-8 {
		t.Fatalf("body of %d bytes (%v), want %d", len(body), err, rulesserver.MaxDocumentBytes-8)
	}
	stored, err := rulesserver.Apply(context.Background(), nil, m.hs.URL, &rulesv1.OverrideFile{Documents: []*rulesv1.OverrideDocument{doc}})
	if err != nil || len(stored) != 1 || stored[0].GetRevision() == "" {
		t.Fatalf("Apply: %d stored, error %v; want the document stored with its revision", len(stored), err)
	}
	if !m.stored(t) {
		t.Fatal("not stored")
	}
}

// The decoded documents the server keeps (so that an unchanged document
// costs GetRules no decoding) are bounded by their size, not only by their
// number: ten thousand documents of up to 1 MiB each, every one many times
// that once decoded, would hold gigabytes. Past the bound the oldest are
// read again; the latest stay.
func TestDecodedDocumentsBoundedInBytes(t *testing.T) {
	var read atomic.Int64
	rdb := redistest.CountingClient(t, &read)
	prefix := redistest.Prefix(t)
	s, err := rulesserver.New(rulesserver.Config{Redis: rdb, KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 20 // of about 1 MiB each: over the bound together
	size := 0
	for i := range n {
		d := mustDoc(t, docJSON)
		d.Limiter = fmt.Sprintf("l%02d", i)
		for j := range 1000 {
			d.Overrides = append(d.Overrides, &rulesv1.Override{
				Selector:    map[string]string{"plan": fmt.Sprintf("p%d", j)},
				Description: strings.Repeat("d", 1000),
			})
		}
		body, err := protoMarshal(d)
		if err != nil {
			t.Fatal(err)
		}
		size = len(body)
		if err := rdb.HSet(ctx, prefix+"web:"+d.Limiter, "rev", "1-x", "body", body).Err(); err != nil {
			t.Fatal(err)
		}
	}
	getRules := func(limiter string) int64 {
		t.Helper()
		read.Store(0)
		if _, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: limiter}); err != nil {
			t.Fatalf("GetRules %s: %v", limiter, err)
		}
		return read.Load()
	}
	for i := range n {
		getRules(fmt.Sprintf("l%02d", i))
	}
	if got := getRules(fmt.Sprintf("l%02d", n-1)); got > 16<<10 {
		t.Fatalf("the latest document: read %d bytes again, want its revision alone", got)
	}
	if got := getRules("l00"); got < int64(size) {
		t.Fatalf("the first of %d documents of %d bytes: read %d bytes, want it read again (not kept)", n, size, got)
	}
}

// With the service's available_limiters.yaml, a document names only its
// limiter's properties (Config.Available): a selector is on identifier
// properties too, and one on a property the limiter's identifiers do not
// carry (a typo: paln) selects nothing, so its override would silently
// never apply. It is refused on write, on read and in an apply file, as a
// rule's undeclared characteristic is; without the file it is taken.
func TestSelectorPropertiesDeclared(t *testing.T) {
	available, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(`available_limiters:
  rack_request:
    description: every request
    available_properties: [root_namespace, plan]
`))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	s, err := rulesserver.New(rulesserver.Config{Redis: rdb, KeyPrefix: prefix, Logger: slog.New(slog.DiscardHandler),
		Available: map[string]*config.AvailableLimiters{"web": available}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Put(ctx, mustDoc(t, docJSON)); err != nil {
		t.Fatalf("declared selectors: %v", err)
	}
	typo := mustDoc(t, docJSON)
	typo.Overrides[0].Selector = map[string]string{"paln": "premium"}
	const want = `overrides[0].selector: selector property "paln" is not one of the limiter's available_properties (root_namespace, plan)`
	var ve *config.ValidationError
	if _, err := s.Put(ctx, typo); !errors.As(err, &ve) || !strings.Contains(err.Error(), want) {
		t.Fatalf("an undeclared selector property: %v, want a ValidationError with %q", err, want)
	}
	// Written past the server (by hand): refused on read, clients fail open.
	body, err := protoMarshal(typo)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, prefix+"web:rack_request", "rev", "9-hand", "body", body).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "paln") {
		t.Fatalf("stored: %v, want Unavailable naming paln", err)
	}
	file := `documents:
  - service: web
    limiter: rack_request
    overrides:
      - selector: {paln: premium}
`
	avail := map[string]*config.AvailableLimiters{"web": available}
	if _, err := rulesserver.ParseOverrideFile("o.yaml", []byte(file), avail); err == nil || !strings.Contains(err.Error(), "o.yaml: documents[0] (web/rack_request)") || !strings.Contains(err.Error(), `selector property "paln"`) {
		t.Fatalf("apply file: %v", err)
	}
	if _, err := rulesserver.ParseOverrideFile("o.yaml", []byte(file), nil); err != nil {
		t.Fatalf("apply file without available_limiters.yaml: %v", err)
	}
}

// A stored document with fields this version does not know, at the top or
// nested in a rule (a later version's, or a hand-write), is refused on read
// as a PUT of them is: ignored, such a field could carry what the rules mean.
// The same document without them is served.
func TestStoredUnknownFieldsRefused(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	s, err := rulesserver.New(rulesserver.Config{Redis: rdb, KeyPrefix: prefix, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)
	for _, tt := range []struct {
		name  string
		mod   func(d *rulesv1.OverrideDocument)
		serve bool
	}{
		{"known fields only", func(*rulesv1.OverrideDocument) {}, true},
		{"an unknown field of the document", func(d *rulesv1.OverrideDocument) { d.ProtoReflect().SetUnknown(unknown) }, false},
		{"an unknown field of a rule", func(d *rulesv1.OverrideDocument) {
			d.GetDefaultRules().GetRules()[0].ProtoReflect().SetUnknown(unknown)
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := mustDoc(t, docJSON)
			tt.mod(d)
			body, err := protoMarshal(d)
			if err != nil {
				t.Fatal(err)
			}
			if err := rdb.HSet(ctx, prefix+"web:rack_request", "rev", "9-"+strings.ReplaceAll(tt.name, " ", "_"), "body", body).Err(); err != nil {
				t.Fatal(err)
			}
			_, err = s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"})
			if served := err == nil; served != tt.serve {
				t.Fatalf("GetRules: %v, want served %v", err, tt.serve)
			}
			if !tt.serve && (status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "does not know")) {
				t.Fatalf("GetRules: %v, want Unavailable naming the unknown fields", err)
			}
		})
	}
}
