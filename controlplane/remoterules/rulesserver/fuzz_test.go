package rulesserver_test

import (
	"context"
	"testing"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesserver"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	"github.com/ratekit/ratekit/internal/redistest"
)

// FuzzPut feeds arbitrary management API bodies (protojson of
// OverrideDocument) to Put on a real Redis: a rejected document leaves the
// stored one as it was; an accepted one reads back as stored, and every
// answer it gives passes the checks every client applies (protovalidate and
// the rate_limits.yaml rule checks), so no client rejects it.
func FuzzPut(f *testing.F) {
	f.Add([]byte(docJSON))
	f.Add([]byte(`{"default_rules": {"rules": [{"name": "a", "action": "ACTION_SKIP"}, {"name": "a", "action": "ACTION_SKIP"}]}}`))
	f.Add([]byte(`{"overrides": [{"selector": {"a": "1", "b": "2"}, "rules": {"mode": "MODE_SHADOW"}}], "cache_for_s": 86400, "stale_for_s": 604800}`))
	f.Add([]byte(`{"service": "web", "limiter": "other", "revision": "x"}`))
	f.Add([]byte(`{"overrides": [{"selector": {"A": "1"}}], "cache_for_s": 86401}`))
	f.Add([]byte(`{"default_rules": {"rules": [{"name": "r", "action": "ACTION_LIMIT", "limit": 1, "period_s": 1, "match": {"p": {"regex": "(a"}}}]}}`))
	ctx := context.Background()
	s, err := rulesserver.New(rulesserver.Config{Redis: redistest.Client(f), KeyPrefix: redistest.Prefix(f)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		doc := &rulesv1.OverrideDocument{}
		if protojson.Unmarshal(body, doc) != nil {
			return // answered 400 before Put
		}
		if doc.Service == "" { // as the PUT handler fills them from its path
			doc.Service = "web"
		}
		if doc.Limiter == "" {
			doc.Limiter = "rack_request"
		}
		doc.Revision = "" // write regardless of what is stored
		before, beforeErr := s.Get(ctx, doc.Service, doc.Limiter)
		out, err := s.Put(ctx, doc)
		if err != nil {
			after, afterErr := s.Get(ctx, doc.Service, doc.Limiter)
			if !proto.Equal(after, before) || (afterErr == nil) != (beforeErr == nil) {
				t.Fatalf("a rejected document (%v) changed the stored one:\nbefore %v (%v)\nafter  %v (%v)", err, before, beforeErr, after, afterErr)
			}
			return
		}
		got, err := s.Get(ctx, doc.Service, doc.Limiter)
		if err != nil || !proto.Equal(got, out) {
			t.Fatalf("stored %v, read back %v (%v)", out, got, err)
		}
		ids := []map[string]string{nil}
		for _, o := range doc.GetOverrides() {
			ids = append(ids, o.GetSelector())
		}
		for _, id := range ids {
			req := &rulesv1.GetRulesRequest{Service: doc.Service, Limiter: doc.Limiter, Identifier: id}
			if protovalidate.Validate(req) != nil {
				continue // no client sends it
			}
			resp, err := s.GetRules(ctx, req)
			if err != nil {
				t.Fatalf("GetRules for %v: %v", id, err)
			}
			if err := protovalidate.Validate(resp); err != nil {
				t.Fatalf("an accepted document answers %v, which every client rejects: %v", resp, err)
			}
			if len(resp.GetRules().GetRules()) > 0 {
				if err := config.ValidateRuleList(doc.Limiter, resp.GetRules(), nil); err != nil {
					t.Fatalf("an accepted document answers rules every client rejects: %v", err)
				}
			}
		}
	})
}
