package rulestore

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
	"github.com/ratekit/ratekit/observability/observe"
	"github.com/ratekit/ratekit/pages/debug"
)

// Tier precedence on a real limiter whose counters are in Redis: a rule that
// reuses a lower tier's name replaces it and carries on its counter.
func TestTierPrecedenceInheritsCounter(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{})
		lim, err := ratelimit.New(ratelimit.Config{Name: "search", Store: redisstore.New(c), KeyPrefix: redistest.Prefix(t), Timeout: checkTimeout})
		if err != nil {
			t.Fatal(err)
		}
		defaults := []ratelimit.Rule{rule("by_user", 5)}
		if err := s.Bind(lim, tiers.Set{Defaults: defaults}); err != nil {
			t.Fatal(err)
		}
		alice := ratelimit.Identifier{"user": "alice"}
		check := func(wantCount float64, wantBlocked bool, wantLimit int64) {
			t.Helper()
			res := lim.Check(ctx, alice)
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if res.Info == nil || res.Info.Count != wantCount || res.Blocked() != wantBlocked || res.Info.Limit != wantLimit {
				t.Fatalf("check: %+v (info %+v), want count %v blocked %v limit %d", res, res.Info, wantCount, wantBlocked, wantLimit)
			}
		}
		for i := 1; i <= 3; i++ {
			check(float64(i), false, 5)
		}
		// Published by_user (limit 4) replaces the default and keeps its count.
		if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("by_user", 4), rule("extra", 100)}})); err != nil {
			t.Fatal(err)
		}
		if err := s.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if got := names(lim.Rules()); !slices.Equal(got, []string{"by_user", "extra"}) {
			t.Fatalf("rules = %v", got)
		}
		check(4, false, 4)
		check(5, true, 4)
		// A file rule of the same name outranks the published one.
		if _, err := s.Seed(ctx, map[string]tiers.Set{"search": {File: []ratelimit.Rule{rule("by_user", 10)}, Defaults: defaults}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		check(6, false, 10)
		set, ok := s.Tiers("search")
		if !ok {
			t.Fatal("Tiers: not bound")
		}
		var effective []string
		for _, r := range set.Rules() {
			if r.OverriddenBy == "" {
				effective = append(effective, r.Tier+":"+r.Rule.Name)
			}
		}
		if !slices.Equal(effective, []string{"file:by_user", "published:extra"}) {
			t.Fatalf("effective tiers = %v", effective)
		}
		// Deleting the published rules leaves file ++ default.
		if _, err := s.Delete(ctx, "search", "by_user", "extra"); err != nil {
			t.Fatal(err)
		}
		if err := s.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if got := lim.Rules(); !slices.Equal(names(got), []string{"by_user"}) || limitOf(t, got, "by_user") != 10 {
			t.Fatalf("after delete: %v", names(got))
		}
	})
}

// A rule published through one store (process) reaches a limiter bound in
// another within the refresh interval.
func TestRefreshAcrossProcesses(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		prefix := testPrefix(t)
		writer := newStore(t, c, Options{Prefix: prefix})
		// The reader has its own connection, as another process would.
		var rc redis.UniversalClient
		if _, ok := c.(*redis.ClusterClient); ok {
			rc = redistest.ClusterClient(t)
		} else {
			rc = redistest.Client(t)
		}
		metrics := &recordingMetrics{}
		reader := newStore(t, rc, Options{Prefix: prefix, Interval: 20 * time.Millisecond, Metrics: metrics})
		lim := newLimiter(t, "search", ratelimit.NewMemoryStore())
		if err := reader.Bind(lim, tiers.Set{Defaults: []ratelimit.Rule{rule("by_user", 50)}}); err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := reader.Start(runCtx)
		defer func() { cancel(); <-done }()

		if _, err := writer.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("by_user", 2)}})); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "published rule in the other process's limiter", func() bool {
			return limitOf(t, lim.Rules(), "by_user") == 2
		})
		bob := ratelimit.Identifier{"user": "bob"}
		lim.Check(ctx, bob)
		lim.Check(ctx, bob)
		if res := lim.Check(ctx, bob); !res.Blocked() {
			t.Fatalf("third check under the published limit 2: %+v", res)
		}
		set, _ := reader.Tiers("search")
		refreshedAt, refreshErr := reader.RefreshStatus("search")
		if refreshedAt.IsZero() || refreshErr != nil || len(set.Published) != 1 {
			t.Fatalf("tiers = %+v, refreshed at %v, error %v", set, refreshedAt, refreshErr)
		}
		if ok, failed := metrics.counts("search"); ok == 0 || failed != 0 {
			t.Fatalf("refresh metrics: %d ok, %d failed", ok, failed)
		}
		stopped(t, cancel, done, "Run")
	})
}

// publishedSearch binds a "search" limiter (default by_user: 100), publishes
// by_user: 2 and refreshes.
func publishedSearch(t *testing.T, c Client, opts Options) (*Store, *ratelimit.Limiter) {
	t.Helper()
	s := newStore(t, c, opts)
	lim := newLimiter(t, "search", ratelimit.NewMemoryStore())
	if err := s.Bind(lim, tiers.Set{Defaults: []ratelimit.Rule{rule("by_user", 100)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("by_user", 2)}})); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	return s, lim
}

// stopped ends a background loop's context and waits for it to return.
func stopped(t *testing.T, cancel context.CancelFunc, done <-chan struct{}, what string) {
	t.Helper()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not return after its context ended", what)
	}
}

// Redis stopped: the limiter keeps enforcing the last good rules. Redis back
// without the documents (a flushed store): the compiled defaults.
func TestOutageKeepsLastGoodRules(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	metrics := &recordingMetrics{}
	s := newStore(t, c, Options{Interval: 10 * time.Millisecond, Timeout: 300 * time.Millisecond, Metrics: metrics, Logger: slog.New(slog.DiscardHandler)})
	lim := newLimiter(t, "search", ratelimit.NewMemoryStore())
	if err := s.Bind(lim, tiers.Set{Defaults: []ratelimit.Rule{rule("by_user", 100)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("by_user", 2)}})); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := s.Start(runCtx)
	defer func() { cancel(); <-done }()
	eventually(t, 10*time.Second, "published rule applied", func() bool { return limitOf(t, lim.Rules(), "by_user") == 2 })

	srv.Stop()
	eventually(t, 10*time.Second, "failed refreshes", func() bool {
		_, failed := metrics.counts("search")
		return failed >= 3
	})
	if refreshedAt, refreshErr := s.RefreshStatus("search"); refreshErr == nil || refreshedAt.IsZero() {
		t.Fatalf("during the outage: refreshed at %v, error %v", refreshedAt, refreshErr)
	}
	if got := limitOf(t, lim.Rules(), "by_user"); got != 2 {
		t.Fatalf("limit during the outage = %d, want the last good 2", got)
	}
	carol := ratelimit.Identifier{"user": "carol"}
	lim.Check(ctx, carol)
	lim.Check(ctx, carol)
	if res := lim.Check(ctx, carol); !res.Blocked() {
		t.Fatalf("last good rule not enforced during the outage: %+v", res)
	}

	srv.Restart(t) // no persistence: the store comes back empty
	eventually(t, 10*time.Second, "compiled defaults after the documents vanished", func() bool {
		return limitOf(t, lim.Rules(), "by_user") == 100
	})
	if set, _ := s.Tiers("search"); len(set.Published) != 0 {
		t.Fatalf("after recovery: %+v", set)
	}
	if _, refreshErr := s.RefreshStatus("search"); refreshErr != nil {
		t.Fatalf("after recovery: %v", refreshErr)
	}
}

// A process that starts while Redis is down runs on its compiled defaults,
// and picks the documents up once Redis answers.
func TestStartWithRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Stop()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	metrics := &recordingMetrics{}
	s := newStore(t, c, Options{Interval: 10 * time.Millisecond, Timeout: 300 * time.Millisecond, Metrics: metrics, Logger: slog.New(slog.DiscardHandler)})
	compiled := []ratelimit.Rule{rule("by_user", 3)}
	lim, err := ratelimit.New(ratelimit.Config{Name: "search", Store: ratelimit.NewMemoryStore(), Rules: compiled})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Bind(lim, tiers.Set{Defaults: compiled}); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(ctx); err == nil {
		t.Fatal("refresh with Redis down succeeded")
	}
	refreshedAt, refreshErr := s.RefreshStatus("search")
	if !refreshedAt.IsZero() || refreshErr == nil || limitOf(t, lim.Rules(), "by_user") != 3 {
		t.Fatalf("with Redis down: refreshed at %v, error %v, rules %v", refreshedAt, refreshErr, names(lim.Rules()))
	}
	dave := ratelimit.Identifier{"user": "dave"}
	for range 3 {
		lim.Check(ctx, dave)
	}
	if res := lim.Check(ctx, dave); !res.Blocked() {
		t.Fatalf("compiled default not enforced: %+v", res)
	}
	if _, failed := metrics.counts("search"); failed == 0 {
		t.Fatal("no failed refresh reported")
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := s.Start(runCtx)
	defer func() { cancel(); <-done }()
	srv.Restart(t)
	eventually(t, 10*time.Second, "publish once Redis is up", func() bool {
		_, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("by_user", 7)}}))
		return err == nil
	})
	eventually(t, 10*time.Second, "published rule applied", func() bool { return limitOf(t, lim.Rules(), "by_user") == 7 })
}

// An invalid document is rejected whole: the limiter keeps its last good
// rules, the rejection is logged and counted once, and a fixed document is
// picked up.
func TestInvalidDocumentKeepsLastGood(t *testing.T) {
	c := redistest.Client(t)
	var logs testlog.Buffer
	metrics := &recordingMetrics{}
	s, lim := publishedSearch(t, c, Options{Metrics: metrics, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for _, bad := range []string{
		"", // an empty string is a document too: rejected, and logged like any other
		`{"published_rules":{"rules":[{"name":"by_user","limit":0,"period_s":60,"action":"limit","characteristics":[],"match":{}}]}}`,
		`{"published_rules":{"rules":[{"name":"x","limit":1,"period_s":60,"action":"limit","characteristics":[],"match":{"p":{"regex":"(("}}}]}}`,
		`{"published_rules":`,
	} {
		if err := c.Set(ctx, s.Key("search"), bad, 0).Err(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := s.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "keeps its rules") {
				t.Fatalf("%s: refresh error = %v", bad, err)
			}
		}
		if got := lim.Rules(); len(got) != 1 || limitOf(t, got, "by_user") != 2 {
			t.Fatalf("%s: rules changed to %v", bad, names(got))
		}
	}
	if len(metrics.rejected) != 4 || metrics.rejected[0] != s.Key("search") {
		t.Fatalf("rejections reported: %v, want the key once per bad document", metrics.rejected)
	}
	if n := strings.Count(logs.String(), "rate_limit_rule_document_rejected"); n != 4 {
		t.Fatalf("%d rejection log lines, want 4:\n%s", n, logs.String())
	}
	if _, refreshErr := s.RefreshStatus("search"); refreshErr == nil {
		t.Fatal("RefreshStatus hides the rejection")
	}
	if _, err := c.Del(ctx, s.Key("search")).Result(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("by_user", 9)}})); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := limitOf(t, lim.Rules(), "by_user"); got != 9 {
		t.Fatalf("fixed document not applied: %d", got)
	}
}

func TestBindErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redistest.UnusedAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, c, Options{})
	lim := newLimiter(t, "search", ratelimit.NewMemoryStore())
	if err := s.Bind(nil, tiers.Set{}); err == nil {
		t.Error("nil limiter bound")
	}
	if err := s.Bind(lim, tiers.Set{Defaults: []ratelimit.Rule{rule("dup", 1), rule("dup", 2)}}); err == nil {
		t.Error("invalid local tiers bound")
	}
	for _, local := range []tiers.Set{{Published: []ratelimit.Rule{rule("p", 1)}}, {Remote: []ratelimit.Rule{rule("r", 1)}}, {Mode: new(ratelimit.Enforcement(7))}} {
		if err := s.Bind(lim, local); err == nil {
			t.Errorf("local tiers %+v bound: a service owns its file and default tiers only", local)
		}
		// Refused before any network call (the store's Redis is unreachable).
		if _, err := s.Seed(ctx, map[string]tiers.Set{"search": local}); err == nil || !strings.Contains(err.Error(), "limiter search: ") {
			t.Errorf("local tiers %+v seeded: %v", local, err)
		}
	}
	if err := s.Bind(lim, tiers.Set{File: []ratelimit.Rule{rule("a", 1)}, Defaults: []ratelimit.Rule{rule("a", 2), rule("b", 3)}}); err != nil {
		t.Fatal(err)
	}
	if got := lim.Rules(); !slices.Equal(names(got), []string{"a", "b"}) || limitOf(t, got, "a") != 1 {
		t.Fatalf("Bind did not apply file ++ defaults: %v", names(got))
	}
	if err := s.Bind(newLimiter(t, "search", ratelimit.NewMemoryStore()), tiers.Set{}); err == nil {
		t.Error("second limiter of the same name bound")
	}
	if _, ok := s.Tiers("other"); ok {
		t.Error("Tiers of an unbound limiter")
	}
}

// The debug page shows the store's tiers and replica age.
func TestDebugPageShowsTiers(t *testing.T) {
	c := redistest.Client(t)
	s, lim := publishedSearch(t, c, Options{})
	srv := httptest.NewServer(debug.New(debug.Options{Tiers: s}, lim))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "?format=json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page debug.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	if len(page.Limiters) != 1 {
		t.Fatalf("page: %+v", page)
	}
	l := page.Limiters[0]
	if l.RuleStore == nil || l.RuleStore.RefreshedAt == nil || l.RuleStore.ReplicaAge == nil {
		t.Fatalf("rule store view: %+v", l.RuleStore)
	}
	if len(l.Rules) != 1 || l.Rules[0].Tier != tiers.Published || *l.Rules[0].Limit != 2 ||
		len(l.Overridden) != 1 || l.Overridden[0].Tier != tiers.Default {
		t.Fatalf("rules %+v overridden %+v", l.Rules, l.Overridden)
	}
}

var (
	_ ConfigWatcher  = (*observe.Metrics)(nil)
	_ ConfigAcceptor = (*observe.Metrics)(nil)
)

// With observe.Metrics the refreshes, the replica age and the rejections
// reach Prometheus; a bound document's rejection counter is exported at 0
// from Bind, so that a rejection, even at the first refresh of a restarted
// process, is an increase (a counter born at 1 is none to increase()).
func TestPrometheusMetrics(t *testing.T) {
	c := redistest.Client(t)
	now := time.Unix(1_800_000_000, 0)
	m := observe.NewMetrics(observe.MetricsOptions{Now: func() time.Time { return now }})
	s := newStore(t, c, Options{Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	for _, name := range []string{"search", "projects"} {
		if err := s.Bind(newLimiter(t, name, ratelimit.NewMemoryStore()), tiers.Set{}); err != nil {
			t.Fatal(err)
		}
	}
	const rejectionsHead = `
# HELP ratelimit_config_rejections_total Rate-limit config files rejected whole (the previous rules stay in use).
# TYPE ratelimit_config_rejections_total counter
`
	bound := rejectionsHead + `ratelimit_config_rejections_total{file="` + s.Key("projects") + `"} 0
ratelimit_config_rejections_total{file="` + s.Key("search") + `"} 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(bound), "ratelimit_config_rejections_total"); err != nil {
		t.Fatalf("after Bind: %v", err)
	}
	if err := c.Set(ctx, s.Key("projects"), "{", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(ctx); err == nil {
		t.Fatal("refresh with an invalid document succeeded")
	}
	now = now.Add(30 * time.Second)
	want := `
# HELP ratelimit_rule_store_refreshes_total Refreshes of a limiter's published rules from the rule store; error is true when the refresh failed and the last good rules stayed in use.
# TYPE ratelimit_rule_store_refreshes_total counter
ratelimit_rule_store_refreshes_total{error="false",rate_limiter="search"} 1
ratelimit_rule_store_refreshes_total{error="true",rate_limiter="projects"} 1
# HELP ratelimit_rule_store_replica_age_seconds Seconds since the limiter's rules were last refreshed from the rule store; +Inf when every refresh so far failed.
# TYPE ratelimit_rule_store_replica_age_seconds gauge
ratelimit_rule_store_replica_age_seconds{rate_limiter="projects"} +Inf
ratelimit_rule_store_replica_age_seconds{rate_limiter="search"} 30
# HELP ratelimit_config_rejections_total Rate-limit config files rejected whole (the previous rules stay in use).
# TYPE ratelimit_config_rejections_total counter
ratelimit_config_rejections_total{file="` + s.Key("projects") + `"} 1
ratelimit_config_rejections_total{file="` + s.Key("search") + `"} 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "ratelimit_rule_store_refreshes_total",
		"ratelimit_rule_store_replica_age_seconds", "ratelimit_config_rejections_total"); err != nil {
		t.Fatal(err)
	}
}

// A bound document's config_rejected gauge is 1 from its rejection until a
// refresh loads an accepted document: the rejection counter cannot say that
// a process still runs on its last good rules, and RatekitConfigRejected
// alerts on the gauge, which a restarted process that rejects the document
// again sets again.
func TestPrometheusRejectedGauge(t *testing.T) {
	c := redistest.Client(t)
	m := observe.NewMetrics(observe.MetricsOptions{})
	s := newStore(t, c, Options{Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	if err := s.Bind(newLimiter(t, "search", ratelimit.NewMemoryStore()), tiers.Set{}); err != nil {
		t.Fatal(err)
	}
	gauge := func(want float64) string {
		return `
# HELP ratelimit_config_rejected 1 while the last load of a rate-limit config file was rejected (the process runs on the previous rules), 0 once one is accepted.
# TYPE ratelimit_config_rejected gauge
ratelimit_config_rejected{file="` + s.Key("search") + `"} ` + strconv.FormatFloat(want, 'g', -1, 64) + "\n"
	}
	steps := []struct {
		name    string
		do      func(t *testing.T)
		refresh bool // the refresh succeeds
		want    float64
	}{
		{"bound", func(*testing.T) {}, true, 0},
		{"rejected", func(t *testing.T) {
			if err := c.Set(ctx, s.Key("search"), "{", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}, false, 1},
		{"still rejected", func(*testing.T) {}, false, 1},
		{"deleted", func(t *testing.T) {
			if err := c.Del(ctx, s.Key("search")).Err(); err != nil {
				t.Fatal(err)
			}
		}, true, 0},
		{"rejected again", func(t *testing.T) {
			if err := c.Set(ctx, s.Key("search"), "{", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}, false, 1},
		{"replaced by a valid document", func(t *testing.T) {
			if err := c.Del(ctx, s.Key("search")).Err(); err != nil {
				t.Fatal(err)
			}
			mustPublish(t, s, "search", rule("by_user", 5))
		}, true, 0},
		{"unchanged", func(*testing.T) {}, true, 0},
	}
	for _, st := range steps {
		st.do(t)
		if err := s.Refresh(ctx); (err == nil) != st.refresh {
			t.Fatalf("%s: refresh error %v, want success %v", st.name, err, st.refresh)
		}
		if err := testutil.CollectAndCompare(m, strings.NewReader(gauge(st.want)), "ratelimit_config_rejected"); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
	}
}

// SetLocal swaps a bound limiter's local tiers (a reloaded rate_limits.yaml):
// at once when no document is loaded, and under a document's tiers when one
// is; an invalid list changes nothing.
func TestSetLocal(t *testing.T) {
	s := newStore(t, redistest.Client(t), Options{})
	lim := newLimiter(t, "search", ratelimit.NewMemoryStore())
	if err := s.Bind(lim, tiers.Set{Defaults: []ratelimit.Rule{rule("by_user", 100)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLocal(ctx, "search", tiers.Set{File: []ratelimit.Rule{rule("by_user", 7)}, Defaults: []ratelimit.Rule{rule("by_user", 100)}}); err != nil {
		t.Fatal(err)
	}
	if got := limitOf(t, lim.Rules(), "by_user"); got != 7 {
		t.Fatalf("without a document the new file tier applies at once: limit %d", got)
	}
	if err := s.SetLocal(ctx, "search", tiers.Set{File: []ratelimit.Rule{rule("dup", 1), rule("dup", 2)}}); err == nil {
		t.Fatal("invalid local tiers accepted")
	}
	if got := limitOf(t, lim.Rules(), "by_user"); got != 7 {
		t.Fatalf("a rejected SetLocal changed the rules: limit %d", got)
	}
	if err := s.SetLocal(ctx, "other", tiers.Set{}); err == nil {
		t.Fatal("SetLocal of an unbound limiter accepted")
	}
	if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("published_only", 3)}})); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLocal(ctx, "search", tiers.Set{File: []ratelimit.Rule{rule("by_user", 9)}, Defaults: []ratelimit.Rule{rule("by_user", 100)}}); err != nil {
		t.Fatal(err)
	}
	got := lim.Rules()
	if !slices.Equal(names(got), []string{"by_user", "published_only"}) || limitOf(t, got, "by_user") != 9 {
		t.Fatalf("with a document lacking file and default tiers, the local ones fill them: %v", names(got))
	}
}

// SetLocal reads nothing from Redis, so it is no refresh: while Redis is
// unreachable a reloaded rate_limits.yaml must leave the refresh failing,
// the replica's age growing and its metrics saying so (RatekitRuleStoreStale
// and RatekitRuleStoreRefreshErrors watch them).
func TestSetLocalIsNoRefresh(t *testing.T) {
	down := redis.NewClient(&redis.Options{Addr: redistest.UnusedAddr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	m := &recordingMetrics{}
	s := newStore(t, down, Options{Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	lim := newLimiter(t, "search", ratelimit.NewMemoryStore())
	if err := s.Bind(lim, tiers.Set{Defaults: []ratelimit.Rule{rule("by_user", 100)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(ctx); err == nil {
		t.Fatal("a refresh from an unreachable Redis succeeded")
	}
	if err := s.SetLocal(ctx, "search", tiers.Set{File: []ratelimit.Rule{rule("by_user", 7)}}); err != nil {
		t.Fatal(err)
	}
	if got := limitOf(t, lim.Rules(), "by_user"); got != 7 {
		t.Fatalf("the new file tier does not apply: limit %d", got)
	}
	if ok, failed := m.counts("search"); ok != 0 || failed != 1 {
		t.Errorf("refreshes reported: %d ok, %d failed; want the one failed refresh only", ok, failed)
	}
	if at, err := s.RefreshStatus("search"); !at.IsZero() || err == nil {
		t.Errorf("RefreshStatus after SetLocal = %v, %v; want never refreshed, the refresh error", at, err)
	}
}

// A document read from Redis passes the checks a write would: a rule counting
// by a property the limiter does not declare (written by another SDK or by
// hand) is rejected, and the limiter keeps its last good rules.
func TestReadDocumentCheckedAgainstAvailable(t *testing.T) {
	c := redistest.Client(t)
	s, lim := publishedSearch(t, c, Options{Available: available(t), Logger: slog.New(slog.DiscardHandler)})
	for _, bad := range []string{
		`{"published_rules":{"rules":[{"name":"by_usr","limit":1,"period_s":60,"action":"limit","characteristics":["usr"],"match":{}}]}}`,
		`{"default_rules":{"rules":[{"name":"by_plan","limit":1,"period_s":60,"action":"limit","characteristics":["user"],"match":{"plan":"free"}}]}}`,
	} {
		if err := c.Set(ctx, s.Key("search"), bad, 0).Err(); err != nil {
			t.Fatal(err)
		}
		err := s.Refresh(ctx)
		if err == nil || !strings.Contains(err.Error(), "keeps its rules") {
			t.Fatalf("%s: refresh error = %v", bad, err)
		}
		if got := lim.Rules(); len(got) != 1 || limitOf(t, got, "by_user") != 2 {
			t.Fatalf("%s: rules changed to %v", bad, names(got))
		}
	}
}

// TestClusterFailoverRefreshRecovers: the master of the documents' slot is
// killed and its replica promoted. The refresh must follow the new master
// within a few refreshes; go-redis' cluster client kept dialling the dead
// node until its periodic state reload, 60 s after the last one.
func TestClusterFailoverRefreshRecovers(t *testing.T) {
	redistest.URL(t)
	args := []string{"--cluster-node-timeout", "1000"} // a prompt failover
	nodes := redistest.StartCluster(t, 3, args...)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1})
	defer c.Close()
	s := newStore(t, c, Options{Timeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	master := redistest.MasterOf(t, c, nodes, s.Key("search"))
	replica := redistest.AddReplica(t, nodes, master, args...)
	lim := newLimiter(t, "search", ratelimit.NewMemoryStore())
	if err := s.Bind(lim, tiers.Set{Defaults: []ratelimit.Rule{rule("by_user", 100)}}); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, s, "search", rule("by_user", 2))
	if err := s.Refresh(ctx); err != nil || limitOf(t, lim.Rules(), "by_user") != 2 {
		t.Fatalf("before the failover: %v, rules %v", err, names(lim.Rules()))
	}

	master.Stop()
	replica.WaitMaster(t)
	// A client of the new master (every document is in its one slot)
	// publishes a change the refresh must pick up.
	direct := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer direct.Close()
	writer := newStore(t, direct, Options{Prefix: s.prefix})
	eventually(t, 30*time.Second, "publish after the failover", func() bool {
		_, err := writer.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("by_user", 5)}}))
		return err == nil
	})
	// Counted in refreshes, not time: the first fails on the dead node, the
	// ones after it reach the new master.
	var errs []error
	for range 20 {
		err := s.Refresh(ctx)
		if err == nil {
			break
		}
		errs = append(errs, err)
		time.Sleep(50 * time.Millisecond) // the reload is asynchronous
	}
	if len(errs) == 20 {
		t.Fatalf("20 refreshes after the failover all failed, the last: %v", errs[len(errs)-1])
	}
	if got := limitOf(t, lim.Rules(), "by_user"); got != 5 {
		t.Fatalf("limit after the failover = %d, want the published 5 (failed refreshes: %v)", got, errs)
	}
}
