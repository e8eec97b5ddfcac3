package remoterules_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/remoterules"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// apiAvailable declares a limiter whose overrides select on user, the
// property an attacker controls.
const apiAvailable = `available_limiters:
  api:
    description: every API call
    available_properties: [user, path]
`

func apiClient(t *testing.T, e *e2e, mod func(*remoterules.Config)) *remoterules.Client {
	t.Helper()
	a, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(apiAvailable))
	if err != nil {
		t.Fatal(err)
	}
	return newClient(t, e.rpc, "web", func(c *remoterules.Config) {
		c.Available = a
		if mod != nil {
			mod(c)
		}
	})
}

// userRules are n limit rules per user; with a regex, each matches path
// against an alternation of about 900 bytes, the costliest rule to compile.
func userRules(prefix string, n int, regex bool) *configv1.RuleList {
	list := &configv1.RuleList{}
	for i := range n {
		r := &configv1.Rule{Name: fmt.Sprintf("%s%d", prefix, i), Action: configv1.Action_ACTION_LIMIT,
			Characteristics: []string{"user"}, Limit: u32(100), PeriodS: u32(60)}
		if regex {
			r.Match = map[string]*configv1.MatchValue{"path": {Kind: &configv1.MatchValue_Regex{Regex: bigRegex(i)}}}
		}
		list.Rules = append(list.Rules, r)
	}
	return list
}

func bigRegex(i int) string {
	var b strings.Builder
	b.WriteString("^/(?:")
	for j := 0; b.Len() < 880; j++ {
		if j > 0 {
			b.WriteByte('|')
		}
		fmt.Fprintf(&b, "p%03d_%04d[a-z]+", i, j)
	}
	b.WriteString(")$")
	return b.String()
}

// heapAlloc is the live heap after a full collection.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// askUsers asks the client for users first..first+n-1, 8 at a time.
func askUsers(t *testing.T, c *remoterules.Client, first, n int) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				c.RulesFor(context.Background(), "api", ratelimit.Identifier{"user": fmt.Sprintf("user-%d", i), "path": "/x"})
			}
		})
	}
	for i := first; i < first+n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

// 10,000 distinct users through the client against the real server: the
// answers share the document's compiled rule sets, so the heap grows by a
// cache entry per user (about 250 bytes), not by a rule set per user (over
// 50 MB for these 10 rules when each user's answer was compiled on its own).
func TestDistinctUsersShareCompiledRules(t *testing.T) {
	e := newE2E(t)
	doc := &rulesv1.OverrideDocument{Service: "web", Limiter: "api",
		Overrides:    []*rulesv1.Override{{Selector: map[string]string{"user": "vip"}, Rules: userRules("vip", 2, false)}},
		DefaultRules: userRules("per_user", 10, false)}
	if _, err := e.srv.Put(context.Background(), doc); err != nil {
		t.Fatal(err)
	}
	c := apiClient(t, e, nil)
	askUsers(t, c, 0, 1) // the connection and the limiter's shape
	before := heapAlloc()
	const users = 10_000
	askUsers(t, c, 1, users)
	after := heapAlloc()
	growth := int64(after) - int64(before)
	st := c.Stats()
	t.Logf("heap %d -> %d bytes after %d distinct users (%+d, %d per user); %+v", before, after, users, growth, growth/users, st)
	if st.Calls < users || st.Failures != 0 {
		t.Fatalf("stats %+v: want a successful call per user", st)
	}
	if st.Compiled != 1 || st.Sets != 1 {
		t.Errorf("compiled %d rule sets, %d cached, want 1 and 1: every user got the default rules", st.Compiled, st.Sets)
	}
	if st.Entries != remoterules.DefaultMaxEntries {
		t.Errorf("%d entries, want the default bound %d", st.Entries, remoterules.DefaultMaxEntries)
	}
	if st.Bytes > remoterules.DefaultMaxBytes {
		t.Errorf("cache estimates %d bytes, over the default bound %d", st.Bytes, remoterules.DefaultMaxBytes)
	}
	const bound = 16 << 20
	if growth > bound {
		t.Errorf("heap grew by %d bytes for %d users, want under %d", growth, users, bound)
	}
	if rs := c.RulesFor(context.Background(), "api", ratelimit.Identifier{"user": "vip"}); rs == nil || rs.Rules()[0].Name != "vip0" {
		t.Errorf("the vip override is not answered: %v", rs)
	}
}

// A document of 256 rules with ~900-byte regexes is compiled once, however
// many new users ask: the next users cost neither a compilation nor its
// heap (each compilation of it holds about 12 MB).
func TestBigRegexDocumentCompiledOnce(t *testing.T) {
	e := newE2E(t)
	doc := &rulesv1.OverrideDocument{Service: "web", Limiter: "api",
		Overrides:    []*rulesv1.Override{{Selector: map[string]string{"user": "vip"}, Rules: userRules("vip", 1, false)}},
		DefaultRules: userRules("per_path", 256, true)}
	if _, err := e.srv.Put(context.Background(), doc); err != nil {
		t.Fatal(err)
	}
	c := apiClient(t, e, nil)
	askUsers(t, c, 0, 1)
	if st := c.Stats(); st.Compiled != 1 || st.Failures != 0 {
		t.Fatalf("after the first user: %+v", st)
	}
	before := heapAlloc()
	const users = 100
	askUsers(t, c, 1, users)
	growth := int64(heapAlloc()) - int64(before)
	st := c.Stats()
	t.Logf("heap %+d bytes for %d more users; %+v", growth, users, st)
	if st.Compiled != 1 || st.Failures != 0 || st.Entries != users+1 {
		t.Errorf("stats %+v: want one compilation for %d users", st, users+1)
	}
	if growth > 8<<20 {
		t.Errorf("heap grew by %d bytes for %d users of one rule set, want under 8 MiB", growth, users)
	}
}

// Config.MaxBytes and Config.MaxEntries bound the cache: distinct rule sets
// (an override per user) evict the least recently used answers.
func TestCacheBounds(t *testing.T) {
	e := newE2E(t)
	const users = 40
	doc := &rulesv1.OverrideDocument{Service: "web", Limiter: "api", DefaultRules: userRules("per_user", 1, false)}
	for i := range users {
		doc.Overrides = append(doc.Overrides, &rulesv1.Override{Selector: map[string]string{"user": fmt.Sprintf("user-%d", i)},
			Rules: userRules(fmt.Sprintf("u%d_", i), 8, false)})
	}
	if _, err := e.srv.Put(context.Background(), doc); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		maxEntries int
		maxBytes   int64
	}{
		{"bytes", 0, 64 << 10},
		{"entries", 7, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := apiClient(t, e, func(c *remoterules.Config) { c.MaxEntries, c.MaxBytes = tt.maxEntries, tt.maxBytes })
			for i := range users {
				askUsers(t, c, i, 1)
				st := c.Stats()
				if tt.maxBytes > 0 && st.Bytes > tt.maxBytes {
					t.Fatalf("after %d users the cache estimates %d bytes, over MaxBytes %d", i+1, st.Bytes, tt.maxBytes)
				}
				if tt.maxEntries > 0 && st.Entries > tt.maxEntries {
					t.Fatalf("after %d users %d entries, over MaxEntries %d", i+1, st.Entries, tt.maxEntries)
				}
			}
			st := c.Stats()
			if st.Compiled != users || st.Entries >= users || st.Entries == 0 || st.Sets != st.Entries {
				t.Errorf("stats %+v: want %d compilations and fewer entries than users, one set each", st, users)
			}
		})
	}
}
