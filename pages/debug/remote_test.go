package debug_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observability/observe"
	"github.com/ratekit/ratekit/pages/debug"
)

type staticRemote observe.RemoteStatus

func (s staticRemote) RemoteStatus() observe.RemoteStatus { return observe.RemoteStatus(s) }

// The rules service client's state is on the page, in JSON and in the DOM a
// real Chromium builds; without Options.Remote the page has no such part.
func TestRulesService(t *testing.T) {
	l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: ratelimit.NewMemoryStore()})
	if err != nil {
		t.Fatal(err)
	}
	remote := staticRemote{Service: "web", Entries: 3, Hits: 40, Stale: 2, Misses: 5, Calls: 6, Failures: 4, Invalid: 1, Skipped: 7, BreakerOpen: true}
	srv := httptest.NewServer(debug.New(debug.Options{Remote: remote}, l))
	t.Cleanup(srv.Close)

	_, body := get(t, srv.URL+"?format=json")
	var snap debug.Snapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatal(err)
	}
	if snap.RulesService == nil || *snap.RulesService != observe.RemoteStatus(remote) {
		t.Fatalf("rules_service %+v, want %+v", snap.RulesService, remote)
	}

	dom, _ := runChromium(t, srv.URL, "--dump-dom")
	for _, want := range []string{
		`<p class="rules-service" id="rules-service" data-breaker="open">`,
		`for service <code>web</code>: 3 cached answer(s); checks: 40 hit(s), 2 stale, 5 miss(es), 7 skipped; calls: 6, 4 failed (1 invalid answer(s)); breaker <span class="state state-open">open</span>`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the DOM lacks %s\n%s", want, dom)
		}
	}

	plain := httptest.NewServer(debug.New(debug.Options{}, l))
	t.Cleanup(plain.Close)
	if _, body := get(t, plain.URL); strings.Contains(body, "rules-service") {
		t.Error("a page without Options.Remote shows a rules service")
	}
	if _, body := get(t, plain.URL+"?format=json"); strings.Contains(body, "rules_service") {
		t.Error("JSON without Options.Remote has rules_service")
	}
}
