package rulestore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

var ctx = context.Background()

// checkTimeout is the store timeout of the tests' limiters: generous, so
// that a loaded machine never turns an exact count into a fail-open result.
const checkTimeout = 10 * time.Second

// forEachTarget runs f on the standalone test server and on the test cluster;
// each subtest skips when its server's environment variable is unset.
func forEachTarget(t *testing.T, f func(t *testing.T, c redis.UniversalClient)) {
	t.Run("standalone", func(t *testing.T) { f(t, redistest.Client(t)) })
	t.Run("cluster", func(t *testing.T) { f(t, redistest.ClusterClient(t)) })
}

// testPrefix is a key prefix unique to the test, with the hash tag every
// cluster deployment needs.
func testPrefix(t *testing.T) string { return redistest.Prefix(t) + "{rules}:" }

func newStore(t *testing.T, c Client, opts Options) *Store {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = testPrefix(t)
	}
	if opts.GCScanKeys == 0 {
		// GC's scan covers the server's whole keyspace in one run, whatever
		// the tests sharing it hold (scan_test.go tests the bound).
		opts.GCScanKeys = MaxGCScanKeys
	}
	s, err := New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const availableYAML = `available_limiters:
  autocomplete_users:
    description: "autocomplete"
    available_properties: [user, ip]
    default_rules:
      - name: limit_user_autocompletes_by_user
        characteristics: [user]
        limit: 300
        period_s: 60
        action: limit
  search:
    description: "search"
    available_properties: [user, ip, scope]
  projects:
    description: "projects"
    available_properties: [user]
`

func available(t testing.TB) *config.AvailableLimiters {
	t.Helper()
	a, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(availableYAML))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// rule is a limit rule counted per user.
func rule(name string, limit int64) ratelimit.Rule {
	return ratelimit.Rule{
		Name:            name,
		Characteristics: []string{"user"},
		Limit:           limit,
		Period:          time.Minute,
		Action:          ratelimit.ActionLimit,
	}
}

func protoRule(t testing.TB, name string, limit int64) *configv1.Rule {
	t.Helper()
	p, err := config.RuleToProto(rule(name, limit))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// request builds a publish request: limiter -> rules.
func request(t testing.TB, batch map[string][]ratelimit.Rule) *configv1.PublishRulesRequest {
	t.Helper()
	req := &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{}}
	for lim, rules := range batch {
		l, err := config.RulesToProto(rules)
		if err != nil {
			t.Fatal(err)
		}
		req.RateLimits[lim] = l
	}
	return req
}

// raw returns the stored bytes of key ("" and false when missing).
func raw(t testing.TB, c redis.Cmdable, key string) (string, bool) {
	t.Helper()
	vals, err := c.MGet(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	s, ok := vals[0].(string)
	return s, ok
}

// names lists rule names in order.
func names(rules []ratelimit.Rule) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.Name
	}
	return out
}

func protoNames(l *configv1.RuleList) []string {
	var out []string
	for _, r := range l.GetRules() {
		out = append(out, r.GetName())
	}
	return out
}

func limitOf(t testing.TB, rules []ratelimit.Rule, name string) int64 {
	t.Helper()
	for _, r := range rules {
		if r.Name == name {
			n, _ := r.Limit, r.LimitFunc == nil
			return n
		}
	}
	t.Fatalf("no rule %s in %v", name, names(rules))
	return 0
}

// eventually polls cond every few milliseconds until it holds or the
// deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recordingMetrics is a Metrics that keeps every call.
type recordingMetrics struct {
	mu        sync.Mutex
	refreshes map[string][]error
	rejected  []string
}

func (m *recordingMetrics) RuleStoreRefresh(limiter string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refreshes == nil {
		m.refreshes = map[string][]error{}
	}
	m.refreshes[limiter] = append(m.refreshes[limiter], err)
}

func (m *recordingMetrics) ConfigRejected(file string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rejected = append(m.rejected, file)
}

// counts returns the number of successful and failed refreshes of limiter.
func (m *recordingMetrics) counts(limiter string) (ok, failed int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, err := range m.refreshes[limiter] {
		if err == nil {
			ok++
		} else {
			failed++
		}
	}
	return ok, failed
}

func isNotFound(err error) bool { return errors.Is(err, ErrRuleNotFound) }
