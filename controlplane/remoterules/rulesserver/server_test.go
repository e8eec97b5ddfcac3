package rulesserver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"buf.build/go/protovalidate"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesserver"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

const docJSON = `{
  "service": "web", "limiter": "rack_request", "cache_for_s": 20,
  "default_rules": {"rules": [{"name": "per_ns", "action": "ACTION_LIMIT", "characteristics": ["root_namespace"], "limit": 100, "period_s": 60}]},
  "overrides": [
    {"selector": {"plan": "premium"}, "rules": {"rules": [{"name": "per_ns", "action": "ACTION_LIMIT", "characteristics": ["root_namespace"], "limit": 1000, "period_s": 60}]}},
    {"selector": {"plan": "premium", "root_namespace": "345"}, "rules": {"rules": [{"name": "per_ns", "action": "ACTION_LIMIT", "characteristics": ["root_namespace"], "limit": 5000, "period_s": 60}]}},
    {"selector": {"root_namespace": "345"}, "rules": {"rules": [{"name": "per_ns", "action": "ACTION_SKIP"}]}}
  ]
}`

func newServer(t *testing.T, rdb redis.UniversalClient, available map[string]*config.AvailableLimiters) *rulesserver.Server {
	t.Helper()
	s, err := rulesserver.New(rulesserver.Config{Redis: rdb, KeyPrefix: redistest.Prefix(t), Available: available})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustDoc(t *testing.T, js string) *rulesv1.OverrideDocument {
	t.Helper()
	d := &rulesv1.OverrideDocument{}
	if err := protojson.Unmarshal([]byte(js), d); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestGetRulesMostSpecificSelectorFirst(t *testing.T) {
	for _, target := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.ClusterClient(t) }},
	} {
		t.Run(target.name, func(t *testing.T) {
			s := newServer(t, target.rdb(t), nil)
			ctx := context.Background()
			stored, err := s.Put(ctx, mustDoc(t, docJSON))
			if err != nil {
				t.Fatal(err)
			}
			tests := []struct {
				id        map[string]string
				limit     uint32 // 0: the skip override
				wantMatch bool
			}{
				{map[string]string{"plan": "premium", "root_namespace": "345", "ip": "1"}, 5000, true},
				{map[string]string{"plan": "premium", "root_namespace": "9"}, 1000, true},
				{map[string]string{"plan": "free", "root_namespace": "345"}, 0, true},
				{map[string]string{"plan": "free", "root_namespace": "9"}, 100, false},
				{nil, 100, false},
			}
			for _, tt := range tests {
				resp, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request", Identifier: tt.id})
				if err != nil {
					t.Fatal(err)
				}
				r := resp.GetRules().GetRules()
				if len(r) != 1 || r[0].GetLimit() != tt.limit {
					t.Errorf("%v: rules %v, want limit %d", tt.id, r, tt.limit)
				}
				if !slices.Equal(resp.GetVary(), []string{"plan", "root_namespace"}) || resp.GetRevision() != stored.GetRevision() ||
					resp.GetCacheForS() != 20 || resp.GetStaleForS() == 0 {
					t.Errorf("%v: answer %v", tt.id, resp)
				}
			}
			// A new revision is read (the server keeps the decoded document
			// per revision only).
			changed := mustDoc(t, docJSON)
			changed.DefaultRules.Rules[0].Limit = new(uint32(42))
			if _, err := s.Put(ctx, changed); err != nil {
				t.Fatal(err)
			}
			resp, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"})
			if err != nil || resp.GetRules().GetRules()[0].GetLimit() != 42 || resp.GetRevision() == stored.GetRevision() {
				t.Fatalf("after an update: %v %v, want limit 42 at a new revision", resp, err)
			}
			if _, err := s.Put(ctx, mustDoc(t, docJSON)); err != nil {
				t.Fatal(err)
			}
			stored, _ = s.Get(ctx, "web", "rack_request")
			// known_revision: not modified.
			resp, err = s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request", KnownRevision: stored.GetRevision()})
			if err != nil || !resp.GetNotModified() || len(resp.GetRules().GetRules()) != 0 {
				t.Fatalf("known revision: %v %v, want not_modified", resp, err)
			}
			// Scoped: another service, or another limiter, has no document.
			for _, req := range []*rulesv1.GetRulesRequest{{Service: "api", Limiter: "rack_request"}, {Service: "web", Limiter: "other"}} {
				resp, err := s.GetRules(ctx, req)
				if err != nil || len(resp.GetRules().GetRules()) != 0 || len(resp.GetVary()) != 0 {
					t.Fatalf("%v: %v %v, want an empty answer", req, resp, err)
				}
			}
			if _, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "Bad Name"}); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("bad request: %v, want InvalidArgument", err)
			}
		})
	}
}

func TestStoredDocumentValidatedOnRead(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	s, err := rulesserver.New(rulesserver.Config{Redis: rdb, KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Put(ctx, mustDoc(t, docJSON)); err != nil {
		t.Fatal(err)
	}
	// Tamper with the stored body: a rule with limit 0 (encoded in proto
	// binary as the server stores it), then plain garbage.
	bad := mustDoc(t, docJSON)
	bad.DefaultRules.Rules[0].Limit = new(uint32(0))
	body, _ := protoMarshal(bad)
	for _, b := range []string{body, "garbage"} {
		if err := rdb.HSet(ctx, prefix+"web:rack_request", "body", b).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"}); status.Code(err) != codes.Unavailable {
			t.Fatalf("invalid stored document: %v, want Unavailable (clients fail open)", err)
		}
		if _, err := s.Get(ctx, "web", "rack_request"); err == nil {
			t.Fatal("Get returned an invalid stored document")
		}
	}
}

func do(t *testing.T, method, url, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestManagementAPI(t *testing.T) {
	available, err := config.ParseAvailableLimiters("web/available_limiters.yaml", []byte(`available_limiters:
  rack_request:
    description: every request
    available_properties: [root_namespace, plan]
`))
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, redistest.Client(t), map[string]*config.AvailableLimiters{"web": available})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	url := hs.URL + "/v1/overrides/web/rack_request"

	resp, body := do(t, http.MethodPut, url, docJSON)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %s %s", resp.Status, body)
	}
	rev1 := mustDoc(t, body).GetRevision()
	if rev1 == "" || resp.Header.Get("ETag") != `"`+rev1+`"` {
		t.Fatalf("PUT: revision %q, ETag %q", rev1, resp.Header.Get("ETag"))
	}
	// Idempotent: the same document again keeps the revision.
	if resp, body := do(t, http.MethodPut, url, docJSON); resp.StatusCode != http.StatusOK || mustDoc(t, body).GetRevision() != rev1 {
		t.Fatalf("second PUT: %s %s, want revision %s", resp.Status, body, rev1)
	}
	changed := strings.Replace(docJSON, `"cache_for_s": 20`, `"cache_for_s": 30`, 1)
	if resp, body := do(t, http.MethodPut, url, changed, "If-Match", `"0-stale"`); resp.StatusCode != http.StatusConflict || !strings.Contains(body, "revision") {
		t.Fatalf("PUT with a stale If-Match: %s %s, want 409", resp.Status, body)
	}
	resp, body = do(t, http.MethodPut, url, changed, "If-Match", `"`+rev1+`"`)
	rev2 := mustDoc(t, body).GetRevision()
	if resp.StatusCode != http.StatusOK || rev2 == rev1 {
		t.Fatalf("PUT with the current If-Match: %s %s", resp.Status, body)
	}
	// If-Match: * holds for any stored document (RFC 9110), and for none
	// where nothing is stored.
	if resp, body := do(t, http.MethodPut, url, changed, "If-Match", "*"); resp.StatusCode != http.StatusOK || mustDoc(t, body).GetRevision() != rev2 {
		t.Fatalf("PUT with If-Match: * over a document: %s %s, want 200 at %s", resp.Status, body, rev2)
	}
	other := hs.URL + "/v1/overrides/api/rack_request"
	if resp, body := do(t, http.MethodPut, other, strings.Replace(docJSON, `"service": "web"`, `"service": "api"`, 1), "If-Match", "*"); resp.StatusCode != http.StatusConflict {
		t.Fatalf("PUT with If-Match: * where nothing is stored: %s %s, want 409", resp.Status, body)
	}
	// A DELETE of nothing is 404 with or without a precondition (RFC 9110
	// §13.2.1: a response other than 2xx or 412 ignores it).
	if resp, body := do(t, http.MethodDelete, other, "", "If-Match", "*"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("DELETE with If-Match: * where nothing is stored: %s %s, want 404", resp.Status, body)
	}
	if resp, body := do(t, http.MethodGet, url, ""); resp.StatusCode != http.StatusOK || mustDoc(t, body).GetCacheForS() != 30 || resp.Header.Get("ETag") != `"`+rev2+`"` {
		t.Fatalf("GET: %s %s", resp.Status, body)
	}

	// Invalid documents are rejected whole, naming the rule; nothing changes.
	for _, tt := range []struct{ name, body, want string }{
		{"schema", strings.Replace(docJSON, `"limit": 100`, `"limit": 0`, 1), "per_ns: limit must be at least 1"},
		{"cross-document", strings.Replace(docJSON, `"characteristics": ["root_namespace"], "limit": 100`, `"characteristics": ["user"], "limit": 100`, 1), "is not one of the limiter's available_properties (root_namespace, plan)"},
		{"unknown limiter", strings.Replace(docJSON, `"limiter": "rack_request"`, `"limiter": "nope"`, 1), "the document names web/nope"},
		{"syntax", `{"service": `, "decode override document"},
		{"unknown field", `{"bogus": 1}`, "decode override document"},
	} {
		resp, body := do(t, http.MethodPut, url, tt.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tt.want) {
			t.Errorf("%s: %s %s, want 400 containing %q", tt.name, resp.Status, body, tt.want)
		}
	}
	if resp, body := do(t, http.MethodPut, url, `{"description": "`+strings.Repeat("x", rulesserver.MaxDocumentBytes)+`"}`); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("huge body: %s %.100s, want 413", resp.Status, body)
	}
	if resp, body := do(t, http.MethodGet, url, ""); mustDoc(t, body).GetRevision() != rev2 {
		t.Fatalf("after rejected PUTs: %s %s, want revision %s unchanged", resp.Status, body, rev2)
	}

	// POST /v1/rules answers what GetRules would.
	resp, body = do(t, http.MethodPost, hs.URL+"/v1/rules", `{"service": "web", "limiter": "rack_request", "identifier": {"plan": "premium", "root_namespace": "345"}}`)
	answer := &rulesv1.GetRulesResponse{}
	if err := protojson.Unmarshal([]byte(body), answer); err != nil || resp.StatusCode != http.StatusOK ||
		answer.GetRules().GetRules()[0].GetLimit() != 5000 || !slices.Equal(answer.GetVary(), []string{"plan", "root_namespace"}) {
		t.Fatalf("POST /v1/rules: %s %s (%v)", resp.Status, body, err)
	}
	if resp, body := do(t, http.MethodPost, hs.URL+"/v1/rules", `{"service": "web", "limiter": "Bad"}`); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("POST /v1/rules with a bad limiter: %s %s, want 400", resp.Status, body)
	}

	if resp, _ := do(t, http.MethodDelete, url, "", "If-Match", rev1); resp.StatusCode != http.StatusConflict {
		t.Fatalf("DELETE with a stale If-Match: %s, want 409", resp.Status)
	}
	if resp, _ := do(t, http.MethodDelete, url, "", "If-Match", "*"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE with If-Match: *: %s, want 204", resp.Status)
	}
	if resp, _ := do(t, http.MethodDelete, url, ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("second DELETE: %s, want 404", resp.Status)
	}
	if resp, _ := do(t, http.MethodGet, url, ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET after DELETE: %s, want 404", resp.Status)
	}
	// Recreated with the first content: a new write, never mistaken for a
	// holder of a different document's revision.
	if resp, body := do(t, http.MethodPut, url, docJSON); resp.StatusCode != http.StatusOK || mustDoc(t, body).GetRevision() != rev1 {
		t.Fatalf("recreate: %s %s (same content, same revision %s: not_modified stays correct)", resp.Status, body, rev1)
	}
}

func TestParseOverrideFile(t *testing.T) {
	good := `documents:
  - service: web
    limiter: rack_request
    overrides:
      - selector: {root_namespace: "345"}
        rules:
          - name: per_ns
            action: limit
            characteristics: [root_namespace]
            limit: 5000
            period_s: 60
`
	f, err := rulesserver.ParseOverrideFile("o.yaml", []byte(good), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := f.GetDocuments()[0].GetOverrides()[0].GetRules().GetRules()[0].GetLimit(); n != 5000 {
		t.Fatalf("limit %d", n)
	}
	_, err = rulesserver.ParseOverrideFile("o.yaml", []byte(strings.Replace(good, "limit: 5000", "limit: 0", 1)), nil)
	var ve *config.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "o.yaml:10:20: per_ns: limit must be at least 1") {
		t.Fatalf("error %v, want file:line and rule", err)
	}
	if _, err := rulesserver.ParseOverrideFile("o.yaml", []byte(good+strings.TrimPrefix(good, "documents:\n")), nil); err == nil || !strings.Contains(err.Error(), "web/rack_request is given twice") {
		t.Fatalf("duplicate document: %v", err)
	}
	// Per-request rules have no mode: it is refused at its line, not ignored
	// (a limiter meant to be in shadow would enforce).
	withMode := `documents:
  - service: web
    limiter: rack_request
    overrides:
      - selector: {root_namespace: "345"}
        rules:
          mode: shadow
          rules: [{name: per_ns, action: limit, characteristics: [root_namespace], limit: 5000, period_s: 60}]
`
	if _, err := rulesserver.ParseOverrideFile("o.yaml", []byte(withMode), nil); err == nil || !strings.Contains(err.Error(), "o.yaml:7:") || !strings.Contains(err.Error(), config.ErrPerRequestMode.Error()) {
		t.Fatalf("a mode: %v\n%s", err, withMode)
	}
}

func protoMarshal(d *rulesv1.OverrideDocument) (string, error) {
	d.Revision = ""
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(d)
	return string(b), err
}

// A key of another Redis type where a document belongs (written by hand)
// never wedges the API: GetRules answers Unavailable (clients fail open), a
// PUT replaces it and a DELETE removes it, unless they name a revision,
// which such a key does not have.
func TestWrongTypeKeyReplaceable(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	s, err := rulesserver.New(rulesserver.Config{Redis: rdb, KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := prefix + "web:rack_request"
	wrongType := func(t *testing.T) {
		t.Helper()
		if err := rdb.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.RPush(ctx, key, "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	wrongType(t)
	if _, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("GetRules on a list key: %v, want Unavailable", err)
	}
	withRev := mustDoc(t, docJSON)
	withRev.Revision = "1-abc"
	if _, err := s.Put(ctx, withRev); !errors.Is(err, rulesserver.ErrConflict) {
		t.Fatalf("PUT naming a revision over a list key: %v, want ErrConflict", err)
	}
	if err := s.Delete(ctx, "web", "rack_request", "1-abc"); !errors.Is(err, rulesserver.ErrConflict) {
		t.Fatalf("DELETE naming a revision of a list key: %v, want ErrConflict", err)
	}
	stored, err := s.Put(ctx, mustDoc(t, docJSON))
	if err != nil {
		t.Fatalf("PUT over a list key: %v", err)
	}
	if got, err := s.Get(ctx, "web", "rack_request"); err != nil || got.GetRevision() != stored.GetRevision() {
		t.Fatalf("Get after the PUT: %v, %v", got, err)
	}
	wrongType(t)
	if err := s.Delete(ctx, "web", "rack_request", ""); err != nil {
		t.Fatalf("DELETE of a list key: %v", err)
	}
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("key still exists after DELETE: %d, %v", n, err)
	}
	if err := s.Delete(ctx, "web", "rack_request", ""); !errors.Is(err, rulesserver.ErrNotFound) {
		t.Fatalf("DELETE of nothing: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "web", "rack_request", "*"); !errors.Is(err, rulesserver.ErrNotFound) {
		t.Fatalf("DELETE of nothing with If-Match *: %v, want ErrNotFound", err)
	}
	// Get's ErrNotFound names the document, as Delete's does.
	if _, err := s.Get(ctx, "web", "rack_request"); !errors.Is(err, rulesserver.ErrNotFound) || !strings.Contains(err.Error(), "web/rack_request") {
		t.Fatalf("Get of nothing: %v, want ErrNotFound naming web/rack_request", err)
	}
}

// The lifetimes a server answers must be within the protocol's bounds
// (cache_for_s at most a day, stale_for_s at most a week), which every
// client enforces: New refuses larger ones rather than serve answers that
// every client rejects. At the bounds, answers are valid.
func TestLifetimesWithinProtocol(t *testing.T) {
	rdb := redistest.Client(t)
	tests := []struct {
		name               string
		cacheFor, staleFor time.Duration
		prefix             string // "" for the test's own
		wantErr            string
	}{
		{"at the bounds", 24 * time.Hour, 7 * 24 * time.Hour, "", ""},
		{"cache_for over a day", 24*time.Hour + time.Second, 0, "", "CacheFor"},
		{"stale_for over a week", 0, 7*24*time.Hour + time.Second, "", "StaleFor"},
		{"past uint32 seconds", 0, 1 << 62, "", "StaleFor"},
		// Not a lifetime, but an operator's setting (ratekit-rules
		// -key-prefix) refused here alike: it starts every key.
		{"key prefix over its bound", 0, 0, strings.Repeat("p", ratelimit.MaxKeyPrefixLen+1), "KeyPrefix of 257 bytes, at most 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := tt.prefix
			if prefix == "" {
				prefix = redistest.Prefix(t)
			}
			s, err := rulesserver.New(rulesserver.Config{Redis: rdb, KeyPrefix: prefix, CacheFor: tt.cacheFor, StaleFor: tt.staleFor})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New: %v, want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			resp, err := s.GetRules(context.Background(), &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"})
			if err != nil {
				t.Fatal(err)
			}
			if err := protovalidate.Validate(resp); err != nil {
				t.Fatalf("answer: %v", err)
			}
		})
	}
}
