package debug_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/controlplane/rollout"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/observability/observe"
	"github.com/ratekit/ratekit/pages/debug"
)

// rolloutPage serves two limiters on the real Redis: "checkout" in shadow
// mode whose decisions were compared with a legacy check (1 of 4 divergent,
// one failed open), and "search" enforcing with no decision compared.
func rolloutPage(t *testing.T) *httptest.Server {
	t.Helper()
	store := redisstore.New(redistest.Client(t))
	rm := observe.NewRolloutMetrics(observe.MetricsOptions{})
	mk := func(name string, mode ratelimit.Enforcement) *ratelimit.Limiter {
		l, err := ratelimit.New(ratelimit.Config{Name: name, Store: store, KeyPrefix: redistest.Prefix(t), Enforcement: mode,
			Logger: slog.New(slog.DiscardHandler), Timeout: redisTimeout,
			Rules: []ratelimit.Rule{{Name: "per_user", Characteristics: []string{"user"}, Action: ratelimit.ActionLimit,
				Limit: 2, Period: time.Minute}}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	checkout, search := mk("checkout", ratelimit.Shadow), mk("search", ratelimit.Enforce)
	ro := rollout.New(checkout, rm)
	ctx := context.Background()
	for n := 1; n <= 4; n++ { // the legacy check admits 3: request 3 diverges
		if d := ro.Check(ctx, ratelimit.Identifier{"user": "alice"}, n > 3); d.Result.Err != nil {
			t.Fatal(d.Result.Err)
		}
	}
	ro.Check(ctx, ratelimit.Identifier{"user": "bob"}, false, ratelimit.Cost(-1)) // fails open
	srv := httptest.NewServer(debug.New(debug.Options{Rollout: rm}, checkout, search))
	t.Cleanup(srv.Close)
	return srv
}

func TestRolloutJSON(t *testing.T) {
	srv := rolloutPage(t)
	_, body := get(t, srv.URL+"?format=json")
	var s debug.Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Limiters) != 2 {
		t.Fatalf("limiters: %s", body)
	}
	checkout, search := s.Limiters[0], s.Limiters[1]
	if checkout.Mode != "shadow" || search.Mode != "enforce" || search.Rollout != nil {
		t.Fatalf("modes %s/%s, search rollout %+v", checkout.Mode, search.Mode, search.Rollout)
	}
	r := checkout.Rollout
	if r == nil || r.Compared != 4 || r.Divergent != 1 || r.Failed != 1 || r.Ratio != 0.25 || r.BelowGate {
		t.Fatalf("checkout rollout %+v", r)
	}
	if len(r.Rules) != 2 || r.Rules[1].Rule != "per_user" || r.Rules[1].Counts.NewOnly != 1 {
		t.Fatalf("rules %+v", r.Rules)
	}
}

// TestRolloutChromium renders the page in a real browser: the mode badge and
// the divergence figure are in the DOM.
func TestRolloutChromium(t *testing.T) {
	srv := rolloutPage(t)
	dom, _ := runChromium(t, srv.URL, "--dump-dom")
	checkout, search := section(t, dom, "checkout"), section(t, dom, "search")
	for _, want := range []string{
		`data-mode="shadow">shadow</span> <span class="none">counts, never blocks</span>`,
		`<span data-divergence="0.250000" data-below-gate="false">25.000% divergent</span> (1 of 4 compared, 1 failed open)`,
		`<code>per_user</code>: 1 blocked only by the new limiter, 0 only by the legacy check`,
	} {
		if !strings.Contains(checkout, want) {
			t.Errorf("limiter checkout lacks %s\n%s", want, checkout)
		}
	}
	if !strings.Contains(search, `data-mode="enforce"`) || !strings.Contains(search, "no decisions compared") {
		t.Errorf("limiter search: %s", search)
	}
}

// A limiter whose every decision failed open (the store down since the
// rollout started) has compared nothing: the page said "0.000% divergent
// (0 of 0 compared, 2 failed open) ... below the 0.5 % gate", a divergence
// and a gate passed that no decision measured.
func TestRolloutNothingCompared(t *testing.T) {
	rm := observe.NewRolloutMetrics(observe.MetricsOptions{})
	l, err := ratelimit.New(ratelimit.Config{Name: "outage", Store: ratelimit.NewMemoryStore(), Enforcement: ratelimit.Shadow,
		Logger: slog.New(slog.DiscardHandler),
		Rules:  []ratelimit.Rule{{Name: "per_user", Characteristics: []string{"user"}, Limit: 2, Period: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	ro := rollout.New(l, rm)
	for range 2 {
		ro.Check(context.Background(), ratelimit.Identifier{"user": "bob"}, false, ratelimit.Cost(-1)) // fails open
	}
	srv := httptest.NewServer(debug.New(debug.Options{Rollout: rm}, l))
	t.Cleanup(srv.Close)
	_, body := get(t, srv.URL)
	rollout := regexp.MustCompile(`(?s)<dd class="rollout">.*?</dd>`).FindString(section(t, body, "outage"))
	if strings.Contains(rollout, "divergent") || strings.Contains(rollout, "gate") ||
		!strings.Contains(rollout, "no decisions compared") || !strings.Contains(rollout, "2 failed open") {
		t.Fatalf("limiter with 2 decisions failed open and none compared:\n%s", rollout)
	}
}
