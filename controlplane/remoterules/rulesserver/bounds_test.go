package rulesserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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
