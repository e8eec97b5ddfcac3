package rulesserver_test

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratekit/ratekit/controlplane/remoterules/rulesserver"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
)

// logBuffer collects a server's JSON log records.
type logBuffer struct{ testlog.Buffer }

// records returns the records whose msg is msg.
func (l *logBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		var rec map[string]any
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// invalidStoredRecord is the message of the ERROR record of a stored
// document refused.
const invalidStoredRecord = "rulesserver: invalid override document in Redis; answering an error so clients keep their last answer or their local tiers"

// loggingServer is a Server on rdb under prefix whose records go to logs.
func loggingServer(t *testing.T, rdb redis.UniversalClient, prefix string) (s *rulesserver.Server, logs *logBuffer) {
	t.Helper()
	logs = &logBuffer{}
	s, err := rulesserver.New(rulesserver.Config{Redis: rdb, KeyPrefix: prefix, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s, logs
}

// managed is a Server whose management API runs on a real loopback HTTP
// server, logging into log.
type managed struct {
	srv    *rulesserver.Server
	hs     *httptest.Server
	log    *logBuffer
	port   string
	prefix string // the server's KeyPrefix
}

func newManaged(t *testing.T, cfg rulesserver.Config, wrap func(http.Handler) http.Handler) *managed {
	t.Helper()
	m := &managed{log: &logBuffer{}, prefix: redistest.Prefix(t)}
	cfg.Redis, cfg.KeyPrefix, cfg.Logger = redistest.Client(t), m.prefix, slog.New(slog.NewJSONHandler(m.log, nil))
	var err error
	if m.srv, err = rulesserver.New(cfg); err != nil {
		t.Fatal(err)
	}
	h := m.srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	m.hs = httptest.NewServer(h)
	t.Cleanup(m.hs.Close)
	_, m.port, _ = net.SplitHostPort(m.hs.Listener.Addr().String())
	return m
}

func (m *managed) url() string { return m.hs.URL + "/v1/overrides/web/rack_request" }

// stored reports whether a document of web/rack_request is stored.
func (m *managed) stored(t *testing.T) bool {
	t.Helper()
	_, err := m.srv.Get(context.Background(), "web", "rack_request")
	if err != nil && !errors.Is(err, rulesserver.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// DNS rebinding: a request naming a hostile Host on the loopback listener is
// refused, read or write, and writes nothing; a loopback Host is served.
func TestRebindingHostRefused(t *testing.T) {
	m := newManaged(t, rulesserver.Config{}, nil)
	for _, host := range []string{"evil.example:" + m.port, "evil.example", "127.0.0.1.evil.example:" + m.port} {
		for _, method := range []string{http.MethodPut, http.MethodGet} {
			resp, body := doHost(t, method, m.url(), docJSON, host, "Origin", "http://"+host)
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not a name this server answers to") {
				t.Fatalf("%s with Host %s: %s %s, want 403", method, host, resp.Status, body)
			}
		}
	}
	if m.stored(t) {
		t.Fatal("a PUT with a hostile Host stored the document")
	}
	if n := len(m.log.records(t, "rate_limit_rules_refused")); n != 3 {
		t.Errorf("%d refusal records, want one per refused PUT (3)", n)
	}
	for _, host := range []string{"localhost:" + m.port, "127.0.0.1:" + m.port, "[::1]:" + m.port} {
		if resp, body := doHost(t, http.MethodPut, m.url(), docJSON, host); resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT with Host %s: %s %s", host, resp.Status, body)
		}
	}
	if resp, body := doHost(t, http.MethodDelete, m.url(), "", "evil.example:"+m.port); resp.StatusCode != http.StatusForbidden || !m.stored(t) {
		t.Fatalf("DELETE with a hostile Host: %s %s, stored %v", resp.Status, body, m.stored(t))
	}

	// AllowedHosts replaces the loopback names.
	m = newManaged(t, rulesserver.Config{AllowedHosts: []string{"rules.internal"}}, nil)
	if resp, body := doHost(t, http.MethodPut, m.url(), docJSON, "rules.internal:"+m.port); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT with an allowed Host: %s %s", resp.Status, body)
	}
	if resp, _ := doHost(t, http.MethodGet, m.url(), "", "127.0.0.1:"+m.port); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET with a Host outside AllowedHosts: %s", resp.Status)
	}
}

// doHost is do with the request's Host set to host.
func doHost(t *testing.T, method, url, body, host string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
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

// fromRemote makes the real server see its client at a non-loopback
// address, as a client on another host is seen.
func fromRemote(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = "203.0.113.7:40000"
		h.ServeHTTP(w, r)
	})
}

// A connection from a loopback source to another address of the host is
// forwarded, not local: a mesh sidecar (Istio's inbound) sends every
// client's request from 127.0.0.6 to the pod's IP, and a write without an
// authorization hook was taken as "loopback" from any client of the mesh.
// Without a hook a write needs both ends on loopback; reads still pass.
func TestForwardedLoopbackSourceCannotWrite(t *testing.T) {
	forwarded := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.RemoteAddr = "127.0.0.6:40000" // the sidecar's source
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 8082}))
			h.ServeHTTP(w, r)
		})
	}
	m := newManaged(t, rulesserver.Config{}, forwarded)
	for _, method := range []string{http.MethodPut, http.MethodDelete} {
		if resp, body := do(t, method, m.url(), docJSON); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "authorization hook") {
			t.Fatalf("forwarded %s without a hook: %s %s, want 403", method, resp.Status, body)
		}
	}
	if m.stored(t) {
		t.Fatal("a forwarded PUT without a hook stored the document")
	}
	if resp, _ := do(t, http.MethodGet, m.url(), ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("forwarded GET: %s, want 404 (reads need no hook)", resp.Status)
	}
	if recs := m.log.records(t, "rate_limit_rules_refused"); len(recs) != 2 || recs[0]["remote_addr"] != "127.0.0.6:40000" {
		t.Fatalf("refusal records %v, want one per refused write", recs)
	}
	// A client on the host connecting to loopback still writes.
	m = newManaged(t, rulesserver.Config{}, nil)
	if resp, body := do(t, http.MethodPut, m.url(), docJSON); resp.StatusCode != http.StatusOK {
		t.Fatalf("loopback PUT without a hook: %s %s", resp.Status, body)
	}
	if recs := m.log.records(t, "rate_limit_rules_write"); len(recs) != 1 || recs[0]["who"] != "loopback" {
		t.Fatalf("write records %v, want one by loopback", recs)
	}
}

// Without an authorization hook only loopback clients write; with one, its
// verdict decides, before the body is read, and every write is audited
// with who, what and the outcome.
func TestWriteAuthorization(t *testing.T) {
	m := newManaged(t, rulesserver.Config{}, fromRemote)
	if resp, body := do(t, http.MethodPut, m.url(), docJSON); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "authorization hook") {
		t.Fatalf("remote PUT without a hook: %s %s, want 403", resp.Status, body)
	}
	if m.stored(t) {
		t.Fatal("a remote PUT without a hook stored the document")
	}
	if resp, _ := do(t, http.MethodGet, m.url(), ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("remote GET: %s, want 404 (reads need no hook)", resp.Status)
	}
	if recs := m.log.records(t, "rate_limit_rules_refused"); len(recs) != 1 || recs[0]["op"] != "put" || recs[0]["remote_addr"] != "203.0.113.7:40000" {
		t.Fatalf("refusal records %v", recs)
	}

	var bodies atomic.Int64 // requests the hook let through
	token := func(r *http.Request) (string, bool) {
		ok := subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer s3cret")) == 1
		if ok {
			bodies.Add(1)
			return "ci-deployer", true
		}
		return "", false
	}
	m = newManaged(t, rulesserver.Config{Authorize: token}, fromRemote)
	if resp, body := do(t, http.MethodPut, m.url(), docJSON, "Authorization", "Bearer wrong"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("PUT with a wrong token: %s %s", resp.Status, body)
	}
	resp, body := do(t, http.MethodPut, m.url(), docJSON, "Authorization", "Bearer s3cret")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT with the token: %s %s", resp.Status, body)
	}
	rev := mustDoc(t, body).GetRevision()
	if resp, body := do(t, http.MethodPut, m.url(), `{"service": "web"`, "Authorization", "Bearer s3cret"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("malformed PUT: %s %s", resp.Status, body)
	}
	if resp, body := do(t, http.MethodDelete, m.url(), "", "Authorization", "Bearer s3cret", "If-Match", `"`+rev+`"`); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE with the token: %s %s", resp.Status, body)
	}
	writes := m.log.records(t, "rate_limit_rules_write")
	key := m.prefix + "web:rack_request" // where each write went
	want := []map[string]any{
		// docJSON: 3 overrides, 4 rules (the default one and one each).
		{"level": "INFO", "who": "ci-deployer", "op": "put", "service": "web", "limiter": "rack_request", "outcome": "ok", "revision": rev,
			"key": key, "overrides": 3.0, "rules": 4.0},
		{"level": "WARN", "who": "ci-deployer", "op": "put", "outcome": "error", "key": key},
		{"level": "INFO", "who": "ci-deployer", "op": "delete", "outcome": "ok", "if_match": rev, "key": key},
	}
	if len(writes) != len(want) || bodies.Load() != 3 {
		t.Fatalf("%d write records for 3 authorized writes: %v", len(writes), writes)
	}
	for i, w := range want {
		for k, v := range w {
			if writes[i][k] != v {
				t.Errorf("write record %d: %s = %v, want %v (%v)", i, k, writes[i][k], v, writes[i])
			}
		}
	}
	if n := len(m.log.records(t, "rate_limit_rules_refused")); n != 1 {
		t.Errorf("%d refusal records, want 1 (the wrong token)", n)
	}
}

// A stored document over MaxDocumentBytes is refused by its size: its body
// never crosses the wire (it used to be read whole, then refused).
func TestOversizedStoredDocumentNotRead(t *testing.T) {
	var read atomic.Int64
	rdb := redistest.CountingClient(t, &read)
	prefix := redistest.Prefix(t)
	s, err := rulesserver.New(rulesserver.Config{Redis: rdb, KeyPrefix: prefix, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const size = 8 << 20
	if err := rdb.HSet(ctx, prefix+"web:rack_request", "rev", "1-abc", "body", strings.Repeat("x", size)).Err(); err != nil {
		t.Fatal(err)
	}
	read.Store(0)
	if _, err := s.Get(ctx, "web", "rack_request"); !errors.Is(err, rulesserver.ErrTooLarge) || !strings.Contains(err.Error(), "8388608 bytes") {
		t.Fatalf("Get of an oversized stored document: %v, want ErrTooLarge naming its size", err)
	}
	if _, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("GetRules: %v, want Unavailable", err)
	}
	if n := read.Load(); n > 64<<10 {
		t.Fatalf("read %d bytes from Redis for two refusals of a %d-byte document, want under 64 KiB", n, size)
	}
	// A valid document replaces it and is read again.
	if _, err := s.Put(ctx, mustDoc(t, docJSON)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "web", "rack_request"); err != nil {
		t.Fatalf("Get after a valid PUT: %v", err)
	}
}

// An invalid stored document is read, parsed and logged once per revision:
// later reads of the same revision get its rejection without its body, and
// a new revision (a PUT, or another bad write) is read again.
func TestRejectedStoredDocumentRemembered(t *testing.T) {
	var read atomic.Int64
	rdb := redistest.CountingClient(t, &read)
	prefix := redistest.Prefix(t)
	s, logs := loggingServer(t, rdb, prefix)
	ctx := context.Background()
	// Valid protobuf, rejected on validation (a limit of 0), about 400 KiB.
	bad := mustDoc(t, docJSON)
	bad.DefaultRules.Rules[0].Limit = new(uint32(0))
	for i := range 400 {
		bad.Overrides = append(bad.Overrides, &rulesv1.Override{
			Selector:    map[string]string{"plan": fmt.Sprintf("p%d", i)},
			Description: strings.Repeat("d", 1000),
		})
	}
	body, err := protoMarshal(bad)
	if err != nil {
		t.Fatal(err)
	}
	store := func(rev string) {
		t.Helper()
		if err := rdb.HSet(ctx, prefix+"web:rack_request", "rev", rev, "body", body).Err(); err != nil {
			t.Fatal(err)
		}
	}
	getRules := func() error {
		_, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"})
		return err
	}
	store("1-bad")
	if err := getRules(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("first read: %v, want Unavailable naming the limit", err)
	}
	read.Store(0)
	for range 3 {
		if err := getRules(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "limit") {
			t.Fatalf("read again: %v, want the same rejection", err)
		}
	}
	if _, err := s.Get(ctx, "web", "rack_request"); err == nil {
		t.Fatal("Get returned a rejected document")
	}
	if n := read.Load(); n > 16<<10 {
		t.Fatalf("read %d bytes from Redis for four reads of a rejected %d-byte document, want under 16 KiB", n, len(body))
	}
	if n := len(logs.records(t, invalidStoredRecord)); n != 1 {
		t.Fatalf("%d ERROR records for five reads of one rejected revision, want 1", n)
	}
	// A valid PUT is read; a new bad revision is rejected and logged again.
	if _, err := s.Put(ctx, mustDoc(t, docJSON)); err != nil {
		t.Fatal(err)
	}
	if err := getRules(); err != nil {
		t.Fatalf("after a valid PUT: %v", err)
	}
	store("3-bad")
	if err := getRules(); status.Code(err) != codes.Unavailable {
		t.Fatalf("a new bad revision: %v, want Unavailable", err)
	}
	if n := len(logs.records(t, invalidStoredRecord)); n != 2 {
		t.Fatalf("%d ERROR records after a second bad revision, want 2", n)
	}
}

// A stored revision over the schema's 128 bytes (only a hand-write makes
// one) is refused by its length and never received: it crossed the wire at
// every read, and every GetRules sent it back to Redis as the revision it
// knew. A PUT still replaces it, and its conflict quotes it in part.
func TestLongStoredRevisionNotRead(t *testing.T) {
	var read atomic.Int64
	rdb := redistest.CountingClient(t, &read)
	prefix := redistest.Prefix(t)
	s, logs := loggingServer(t, rdb, prefix)
	ctx := context.Background()
	body, err := protoMarshal(mustDoc(t, docJSON))
	if err != nil {
		t.Fatal(err)
	}
	const size = 8 << 20
	if err := rdb.HSet(ctx, prefix+"web:rack_request", "rev", strings.Repeat("7", size), "body", body).Err(); err != nil {
		t.Fatal(err)
	}
	read.Store(0)
	for range 3 {
		_, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"})
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "revision holds 8388608 bytes, at most 128") {
			t.Fatalf("GetRules: %v, want Unavailable naming the revision's size", err)
		}
	}
	if _, err := s.Get(ctx, "web", "rack_request"); err == nil || !strings.Contains(err.Error(), "revision holds 8388608 bytes") {
		t.Fatalf("Get: %v, want the revision's size", err)
	}
	if n := read.Load(); n > 64<<10 {
		t.Fatalf("read %d bytes from Redis for four reads of a document with a %d-byte revision, want under 64 KiB", n, size)
	}
	if n := len(logs.records(t, invalidStoredRecord)); n != 1 {
		t.Fatalf("%d ERROR records for four reads of one rejected document, want 1", n)
	}
	stale := mustDoc(t, docJSON)
	stale.Revision = "1-abc"
	if _, err := s.Put(ctx, stale); !errors.Is(err, rulesserver.ErrConflict) || len(err.Error()) > 1024 {
		t.Fatalf("PUT at another revision: %.300v (%d bytes), want a conflict quoting the revision in part", err, len(err.Error()))
	}
	if _, err := s.Put(ctx, mustDoc(t, docJSON)); err != nil {
		t.Fatalf("PUT over it: %v", err)
	}
	if _, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"}); err != nil {
		t.Fatalf("GetRules after a PUT: %v", err)
	}
}

// A key of another Redis type where a document belongs (written by hand)
// is an invalid document, refused once with an ERROR record, as a bad body
// is: it failed every read with WRONGTYPE as if Redis were down, so each
// GetRules of it answered "the rule store is unavailable" and, between
// GetRules of other limiters, logged Redis failing and recovering again.
func TestWrongTypeKeyIsAnInvalidDocument(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	s, logs := loggingServer(t, rdb, prefix)
	ctx := context.Background()
	if _, err := s.Put(ctx, mustDoc(t, docJSON)); err != nil {
		t.Fatal(err)
	}
	if err := rdb.RPush(ctx, prefix+"web:other", "x").Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"}); err != nil {
			t.Fatalf("GetRules of a valid document: %v", err)
		}
		_, err := s.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "other"})
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "web/other: its key is a Redis list, not a hash") {
			t.Fatalf("GetRules of a list key: %v, want Unavailable naming the key's type", err)
		}
	}
	if n := len(logs.records(t, invalidStoredRecord)); n != 1 {
		t.Errorf("%d ERROR records for three reads of a list key, want 1", n)
	}
	if n := len(logs.records(t, "rulesserver: the rule store failed; GetRules answers Unavailable until it recovers")); n != 0 {
		t.Errorf("%d records of the rule store failing, want none: Redis answered", n)
	}
}

// A refusal or an error repeats at most 80 characters of what the client
// named (its Host, the names in its path), in the answer and in the log, as
// the admin and debug pages do: the headers are the client's, up to 64 KiB,
// and no client, authorized or not, grows an answer or a record with them.
func TestClientNamesRepeatedInPart(t *testing.T) {
	long := strings.Repeat("a", 32<<10)
	refuse := func(*http.Request) (string, bool) { return "", false }
	tests := []struct {
		name   string
		cfg    rulesserver.Config
		method string
		path   string
		host   string
		wrap   func(http.Handler) http.Handler
		hdr    []string
		body   string // default docJSON
	}{
		{name: "a long Host", method: http.MethodPut, path: "/v1/overrides/web/rack_request", host: long + ".example"},
		{name: "a long path, refused by the hook", cfg: rulesserver.Config{Authorize: refuse}, method: http.MethodPut, path: "/v1/overrides/web/" + long},
		{name: "a long path from a remote client", method: http.MethodDelete, path: "/v1/overrides/web/" + long, wrap: fromRemote},
		{name: "a long path read", method: http.MethodGet, path: "/v1/overrides/web/" + long},
		{name: "a long path deleted from loopback", method: http.MethodDelete, path: "/v1/overrides/web/" + long},
		{name: "a long path put from loopback", method: http.MethodPut, path: "/v1/overrides/web/" + long},
		// The document takes the path's names: its validation named them.
		{name: "a long path put, the document naming none", method: http.MethodPut, path: "/v1/overrides/web/" + long, body: `{}`},
		{name: "a long service put, the document naming none", method: http.MethodPut, path: "/v1/overrides/" + long + "/rack_request", body: `{}`},
		{name: "a long If-Match", method: http.MethodDelete, path: "/v1/overrides/web/rack_request", hdr: []string{"If-Match", long}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManaged(t, tt.cfg, tt.wrap)
			host := tt.host
			if host == "" {
				host = "127.0.0.1:" + m.port
			}
			if tt.hdr != nil { // a document for the If-Match to conflict with
				if resp, body := do(t, http.MethodPut, m.url(), docJSON); resp.StatusCode != http.StatusOK {
					t.Fatalf("PUT: %s %s", resp.Status, body)
				}
			}
			sent := docJSON
			if tt.body != "" {
				sent = tt.body
			}
			resp, body := doHost(t, tt.method, m.hs.URL+tt.path, sent, host, tt.hdr...)
			if resp.StatusCode/100 != 4 || strings.Contains(body, strings.Repeat("a", 81)) || len(body) > 8<<10 {
				t.Fatalf("%s: %s, %d bytes; want a 4xx quoting at most 80 characters of it:\n%.300s", tt.name, resp.Status, len(body), body)
			}
			if a := m.log.String(); strings.Contains(a, strings.Repeat("a", 81)) || len(a) > 8<<10 {
				t.Fatalf("%s: the log quotes it whole (%d bytes):\n%.300s", tt.name, len(a), a)
			}
		})
	}
}

// Apply follows no redirect: answered 301 or 302, a client re-sends a PUT
// as a GET, which answers the stored document with 200, so a file that
// changed nothing was reported applied, with the old revision; answered 307
// or 308, it re-sends the PUT, and the caller's credentials, to wherever the
// answer names. A redirect is an error naming its status, and nothing is
// sent where it points.
func TestApplyFollowsNoRedirect(t *testing.T) {
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			m := newManaged(t, rulesserver.Config{}, nil)
			old, err := m.srv.Put(context.Background(), mustDoc(t, docJSON))
			if err != nil {
				t.Fatal(err)
			}
			var followed atomic.Int64
			target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				followed.Add(1)
				m.srv.Handler().ServeHTTP(w, r)
			}))
			t.Cleanup(target.Close)
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target.URL+r.URL.Path, code)
			}))
			t.Cleanup(front.Close)
			doc := mustDoc(t, docJSON)
			doc.CacheForS = 7 // a change
			stored, err := rulesserver.Apply(context.Background(), nil, front.URL, &rulesv1.OverrideFile{Documents: []*rulesv1.OverrideDocument{doc}})
			if err == nil || !strings.Contains(err.Error(), fmt.Sprint(code)) || len(stored) != 0 {
				t.Fatalf("Apply: %d stored, error %v; want an error naming the redirect", len(stored), err)
			}
			if n := followed.Load(); n != 0 {
				t.Fatalf("%d requests followed the redirect, want none", n)
			}
			now, err := m.srv.Get(context.Background(), "web", "rack_request")
			if err != nil || now.GetRevision() != old.GetRevision() {
				t.Fatalf("stored revision %q (%v), want %q unchanged", now.GetRevision(), err, old.GetRevision())
			}
		})
	}
}

// Apply reports a document applied only when the answer is that document
// stored, with its revision: a 200 of something else (an endpoint of another
// service answering {}, a proxy sending the PUT to another document) made
// `ratekit-rules apply` print "web/rack_request: revision " and exit 0, with
// nothing stored.
func TestApplyNeedsTheStoredDocument(t *testing.T) {
	for name, answer := range map[string]string{
		"empty object":     `{}`,
		"another document": `{"service":"web","limiter":"other","revision":"1-abc"}`,
		"another service":  `{"service":"api","limiter":"rack_request","revision":"1-abc"}`,
		"no revision":      `{"service":"web","limiter":"rack_request"}`,
	} {
		t.Run(name, func(t *testing.T) {
			var puts atomic.Int64
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				puts.Add(1)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, answer)
			}))
			t.Cleanup(front.Close)
			stored, err := rulesserver.Apply(context.Background(), nil, front.URL, &rulesv1.OverrideFile{Documents: []*rulesv1.OverrideDocument{mustDoc(t, docJSON)}})
			if err == nil || len(stored) != 0 || !strings.Contains(err.Error(), "not the stored document") {
				t.Fatalf("Apply: %d stored, error %v; want an error saying the answer is not the stored document", len(stored), err)
			}
			if puts.Load() != 1 {
				t.Fatalf("%d requests, want the one PUT", puts.Load())
			}
		})
	}
	// The real management API's answer passes.
	m := newManaged(t, rulesserver.Config{}, nil)
	stored, err := rulesserver.Apply(context.Background(), nil, m.hs.URL, &rulesv1.OverrideFile{Documents: []*rulesv1.OverrideDocument{mustDoc(t, docJSON)}})
	if err != nil || len(stored) != 1 || stored[0].GetRevision() == "" {
		t.Fatalf("Apply to the management API: %v, %v", stored, err)
	}
}

// A refused GetRules request (over gRPC, or POST /v1/rules) repeats at most
// 80 characters of each property name it sends, and names at most
// config.MaxReportedErrors problems: the names are the client's, and every
// bad one was quoted whole, so a request of 0.6 MB made a refusal of 3.7 MB.
func TestGetRulesRefusalBounded(t *testing.T) {
	long := strings.Repeat("a", 32<<10)
	many := map[string]string{}
	for i := range 50_000 {
		many[fmt.Sprintf("A%d", i)] = ""
	}
	tests := []struct {
		name string
		id   map[string]string
	}{
		{"a long property name", map[string]string{long: "x"}},
		{"many bad property names", many},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManaged(t, rulesserver.Config{}, nil)
			req := &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request", Identifier: tt.id}
			_, err := m.srv.GetRules(context.Background(), req)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("GetRules: %v, want InvalidArgument", err)
			}
			msg := status.Convert(err).Message()
			if !strings.Contains(msg, "identifier") || strings.Contains(msg, strings.Repeat("a", 81)) || len(msg) > 16<<10 {
				t.Fatalf("GetRules refused with %d bytes, want under 16 KiB naming identifier with at most 80 characters of a name:\n%.300s", len(msg), msg)
			}
			body, err := protojson.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			resp, answer := do(t, http.MethodPost, m.hs.URL+"/v1/rules", string(body))
			if resp.StatusCode != http.StatusBadRequest || strings.Contains(answer, strings.Repeat("a", 81)) || len(answer) > 16<<10 {
				t.Fatalf("POST /v1/rules: %s, %d bytes; want 400 under 16 KiB:\n%.300s", resp.Status, len(answer), answer)
			}
		})
	}
}

// A body the JSON decoder refuses is answered, and a PUT's audit record
// logged, with at most a few hundred bytes of the decoder's message: it
// quotes what it could not read (an unknown field's name, a bad value)
// whole, so a 1 MiB body made a 1 MiB answer and WARN record.
func TestUndecodableBodyRepeatedInPart(t *testing.T) {
	long := strings.Repeat("a", 32<<10)
	tests := []struct {
		name, method, path, body string
	}{
		{"a PUT with an unknown field", http.MethodPut, "/v1/overrides/web/rack_request", `{"` + long + `": 1}`},
		{"a PUT with a bad value", http.MethodPut, "/v1/overrides/web/rack_request", `{"cache_for_s": "` + long + `"}`},
		{"a rules request with an unknown field", http.MethodPost, "/v1/rules", `{"` + long + `": 1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManaged(t, rulesserver.Config{}, nil)
			resp, body := do(t, tt.method, m.hs.URL+tt.path, tt.body)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "decode") || len(body) > 1<<10 {
				t.Fatalf("%s, %d bytes; want 400 of at most 1 KiB naming the decoding:\n%.300s", resp.Status, len(body), body)
			}
			if a := m.log.String(); len(a) > 2<<10 {
				t.Fatalf("the log holds %d bytes:\n%.300s", len(a), a)
			}
		})
	}
}

// GetRules, which any client of the gRPC port may call, tells a caller that
// the rule store is unavailable, not why: the cause named Redis's address.
// The server logs the cause once per failure streak, not once per call.
func TestGetRulesHidesTheStoreFailure(t *testing.T) {
	addr := redistest.UnusedAddr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	var logged bytes.Buffer
	s, err := rulesserver.New(rulesserver.Config{Redis: rdb, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	for range 3 {
		_, err := s.GetRules(context.Background(), &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"})
		if status.Code(err) != codes.Unavailable || strings.Contains(err.Error(), port) {
			t.Fatalf("GetRules with Redis down: %v, want Unavailable without Redis's address", err)
		}
	}
	if n := strings.Count(logged.String(), "the rule store failed"); n != 1 || !strings.Contains(logged.String(), port) {
		t.Errorf("logged the failure %d times, want once with its cause:\n%s", n, logged.String())
	}
}
