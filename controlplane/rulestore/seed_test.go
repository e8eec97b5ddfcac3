package rulestore

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
)

// A service whose seed Redis did not take at start (down, hung, refusing
// writes) must not run on the file and default tiers an older version of it
// seeded: the store owes the seed, writes it at the first refresh that
// reaches Redis, and until then runs the limiter on its own tiers over the
// document's published one. No restart is needed.
func TestSeedOwedAfterFailedStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fail makes Redis refuse the seed; heal makes it take writes again.
		fail, heal func(t *testing.T, srv *redistest.Server, c *redis.Client, writeOld func())
		// readable: the documents can be read while the seed fails.
		readable bool
	}{
		{
			name: "down",
			fail: func(t *testing.T, srv *redistest.Server, _ *redis.Client, _ func()) { srv.Stop() },
			heal: func(t *testing.T, srv *redistest.Server, _ *redis.Client, writeOld func()) {
				srv.Restart(t)
				writeOld() // the server keeps nothing: the old document comes back as a persisted one would
			},
		},
		{
			name: "hung",
			fail: func(t *testing.T, srv *redistest.Server, _ *redis.Client, _ func()) { srv.Pause(t) },
			heal: func(t *testing.T, srv *redistest.Server, _ *redis.Client, _ func()) { srv.Resume(t) },
		},
		{
			name: "writes refused",
			fail: func(t *testing.T, _ *redistest.Server, c *redis.Client, _ func()) {
				if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
					t.Fatal(err)
				}
			},
			heal: func(t *testing.T, _ *redistest.Server, c *redis.Client, _ func()) {
				if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
					t.Fatal(err)
				}
			},
			readable: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer admin.Close()
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
				ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, ContextTimeoutEnabled: true})
			defer c.Close()
			prefix := testPrefix(t)

			// The older version of the service seeded its own tiers, and an
			// operator published a rule.
			writeOld := func() {
				t.Helper()
				old := newStore(t, admin, Options{Prefix: prefix})
				if _, err := old.Seed(ctx, map[string]tiers.Set{"search": {
					File:     []ratelimit.Rule{rule("by_user", 5)},
					Defaults: []ratelimit.Rule{rule("old_default", 50)},
				}}); err != nil {
					t.Fatal(err)
				}
				if _, err := old.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("published", 7)}})); err != nil {
					t.Fatal(err)
				}
			}
			writeOld()

			var logs testlog.Buffer
			s := newStore(t, c, Options{Prefix: prefix, Timeout: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			lim := newLimiter(t, "search", ratelimit.NewMemoryStore())
			local := tiers.Set{File: []ratelimit.Rule{rule("by_user", 10)}, Defaults: []ratelimit.Rule{rule("new_default", 100)}}
			if err := s.Bind(lim, local); err != nil {
				t.Fatal(err)
			}
			tc.fail(t, srv, admin, writeOld)
			if _, err := s.SeedBound(ctx); !errors.Is(err, ErrSeedOwed) {
				t.Fatalf("seed on a Redis that refuses it: %v, want ErrSeedOwed", err)
			}
			want := []string{"by_user", "new_default"}
			if tc.readable {
				want = []string{"by_user", "published", "new_default"}
			}
			// Where Redis serves reads, a refresh reads the documents: its
			// read may outlast the short timeout on a loaded machine, so it
			// is tried until it has (Refresh reports the owed seed's error
			// either way).
			eventually(t, 10*time.Second, "a refresh that reads the documents", func() bool {
				_ = s.Refresh(ctx)
				return slices.Equal(names(lim.Rules()), want)
			})
			if got := names(lim.Rules()); !slices.Equal(got, want) || limitOf(t, lim.Rules(), "by_user") != 10 {
				t.Fatalf("while the seed is owed: rules %v (by_user %d), want %v with by_user 10: the older version's tiers",
					got, limitOf(t, lim.Rules(), "by_user"), want)
			}

			tc.heal(t, srv, admin, writeOld)
			eventually(t, 10*time.Second, "a refresh that reaches Redis", func() bool { return s.Refresh(ctx) == nil })
			if got, want := names(lim.Rules()), []string{"by_user", "published", "new_default"}; !slices.Equal(got, want) {
				t.Fatalf("after Redis came back: rules %v, want %v", got, want)
			}
			if got := limitOf(t, lim.Rules(), "by_user"); got != 10 {
				t.Fatalf("after Redis came back: by_user limit %d, want the bound file tier's 10 (5 is the older version's)", got)
			}
			doc, err := s.Document(ctx, "search")
			if err != nil {
				t.Fatal(err)
			}
			if got := protoNames(doc.GetFileRules()); !slices.Equal(got, []string{"by_user"}) || doc.GetFileRules().GetRules()[0].GetLimit() != 10 {
				t.Fatalf("document file tier %v, want the bound by_user of limit 10", doc.GetFileRules())
			}
			if got := protoNames(doc.GetDefaultRules()); !slices.Equal(got, []string{"new_default"}) {
				t.Fatalf("document default tier %v, want the bound [new_default]", got)
			}
			if got := protoNames(doc.GetPublishedRules()); !slices.Equal(got, []string{"published"}) {
				t.Fatalf("document published tier %v, want it kept", got)
			}
			if n := strings.Count(logs.String(), "rate_limit_rule_store_seeded"); n != 1 {
				t.Fatalf("the owed seed logged %d times, want once:\n%s", n, logs.String())
			}

			// Paid: a later refresh seeds nothing more.
			if err := s.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(logs.String(), "rate_limit_rule_store_seeded"); n != 1 {
				t.Fatalf("the seed logged %d times after it was paid, want once:\n%s", n, logs.String())
			}
		})
	}
}

// A seed refused for what it would write (here a stored document no process
// would load) is not tried again at every refresh, which would read and
// parse the documents for a write refused again; the limiters still run on
// their own file and default tiers, not an older seed's, until a SeedBound
// succeeds. The document holds back only its own limiter's seed: the other
// limiters' documents are seeded (a newer version's document that this one
// cannot read, in a rolling deploy, refused the whole seed).
func TestSeedRefusedIsNotRetried(t *testing.T) {
	c := redistest.Client(t)
	var logs testlog.Buffer
	s := newStore(t, c, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if _, err := s.Seed(ctx, map[string]tiers.Set{"search": {File: []ratelimit.Rule{rule("by_user", 5)}}}); err != nil {
		t.Fatal(err)
	}
	oldDoc, _ := raw(t, c, s.Key("search"))
	if err := c.Set(ctx, s.Key("projects"), `{"published_rules":`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	search, projects := newLimiter(t, "search", ratelimit.NewMemoryStore()), newLimiter(t, "projects", ratelimit.NewMemoryStore())
	for _, l := range []*ratelimit.Limiter{search, projects} {
		if err := s.Bind(l, tiers.Set{File: []ratelimit.Rule{rule("by_user", 10)}}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.SeedBound(ctx)
	if !errors.Is(err, ErrInvalidDocument) || errors.Is(err, ErrSeedOwed) || !strings.Contains(err.Error(), s.Key("projects")) {
		t.Fatalf("seed over an invalid document: %v, want ErrInvalidDocument naming %s, not owed", err, s.Key("projects"))
	}
	if got, _ := raw(t, c, s.Key("search")); got == oldDoc || !slices.Equal(res.Changed, []string{"search"}) {
		t.Fatalf("search was not seeded beside the invalid document of projects: changed %v, document %s", res.Changed, got)
	}
	if err := c.Del(ctx, s.Key("projects")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, s.Key("projects")).Result(); err != nil || n != 0 {
		t.Fatalf("a refused seed was written by a refresh: %d, %v", n, err)
	}
	if got := limitOf(t, search.Rules(), "by_user"); got != 10 {
		t.Fatalf("while the seed is owed: by_user %d, want the bound 10 (5 is the older seed's)", got)
	}
	if strings.Contains(logs.String(), "rate_limit_rule_store_seed") {
		t.Fatalf("a refresh tried the refused seed:\n%s", logs.String())
	}

	if _, err := s.SeedBound(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := limitOf(t, search.Rules(), "by_user"); got != 10 {
		t.Fatalf("after the seed: by_user %d, want 10", got)
	}
	if doc, err := s.Document(ctx, "search"); err != nil || doc.GetFileRules().GetRules()[0].GetLimit() != 10 {
		t.Fatalf("after the seed: document %v, %v", doc, err)
	}
}

// deadlines records the context deadline of every command a client sends.
type deadlines struct {
	mu  sync.Mutex
	got []time.Time // zero: a command without a deadline
}

func (d *deadlines) DialHook(next redis.DialHook) redis.DialHook { return next }

func (d *deadlines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		dl, _ := ctx.Deadline()
		d.mu.Lock()
		d.got = append(d.got, dl)
		d.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (d *deadlines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// take returns the deadlines recorded since the last take.
func (d *deadlines) take() []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	got := d.got
	d.got = nil
	return got
}

// While a seed is owed, a refresh on a hung Redis writes the seed and reads
// the documents under one deadline, so that it waits one Options.Timeout,
// not one for the seed and another for the read. Proved by the deadlines the
// commands carry, not by the time the refresh took.
func TestSeedOwedRefreshSharesOneDeadline(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redistest.Blackhole(t), MaxRetries: -1,
		ReadTimeout: time.Hour, WriteTimeout: time.Hour, ContextTimeoutEnabled: true})
	defer c.Close()
	var d deadlines
	c.AddHook(&d)
	s := newStore(t, c, Options{Timeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err := s.Bind(newLimiter(t, "search", ratelimit.NewMemoryStore()), tiers.Set{File: []ratelimit.Rule{rule("by_user", 10)}}); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := s.SeedBound(sctx)
	cancel()
	if !errors.Is(err, ErrSeedOwed) {
		t.Fatalf("seed on a hung Redis: %v, want ErrSeedOwed", err)
	}
	d.take()

	if err := s.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "seed owed") {
		t.Fatalf("refresh on a hung Redis: %v, want the owed seed's error", err)
	}
	got := d.take()
	if len(got) < 2 {
		t.Fatalf("the refresh sent %d command(s), want the seed's and the read's", len(got))
	}
	for i, dl := range got {
		if dl.IsZero() || !dl.Equal(got[0]) {
			t.Fatalf("the refresh's commands have deadlines %v: command %d not at the first's: the seed and the read each wait a Timeout", got, i)
		}
	}
}

// failAlone is a go-redis hook that fails, once, the first command naming
// key and not other: the one-limiter write of key's seed, not the seed of
// every limiter that also names other.
type failAlone struct {
	key, other string
	done       atomic.Bool
}

func (h *failAlone) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failAlone) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if slices.Contains(args, any(h.key)) && !slices.Contains(args, any(h.other)) && h.done.CompareAndSwap(false, true) {
			err := errors.New("connection reset by peer")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *failAlone) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A seed written limiter by limiter beside a document this version cannot
// read is still owed when another limiter's write failed for want of
// Redis: the refusal of one limiter is no reason to stop trying the other,
// which a refresh then seeds. The refusal made the whole seed "not tried
// again", so the other limiter's document kept an older seed until a
// restart.
func TestSeedEachOwesWhatRedisMissed(t *testing.T) {
	c := redistest.Client(t)
	s := newStore(t, c, Options{Logger: slog.New(slog.DiscardHandler)})
	if err := c.Set(ctx, s.Key("projects"), `{"published_rules":`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	c.AddHook(&failAlone{key: s.Key("search"), other: s.Key("projects")})
	for _, name := range []string{"projects", "search"} {
		if err := s.Bind(newLimiter(t, name, ratelimit.NewMemoryStore()), tiers.Set{File: []ratelimit.Rule{rule("by_user", 10)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.SeedBound(ctx); !errors.Is(err, ErrInvalidDocument) || !errors.Is(err, ErrSeedOwed) {
		t.Fatalf("seed over an invalid document, search's write failed: %v, want ErrInvalidDocument and ErrSeedOwed", err)
	}
	if n, err := c.Exists(ctx, s.Key("search")).Result(); err != nil || n != 0 {
		t.Fatalf("search seeded through a failed write: %d, %v", n, err)
	}
	// projects is refused again, so the refresh's seed errs; search is written
	_ = s.Refresh(ctx)
	if doc, err := s.Document(ctx, "search"); err != nil || doc.GetFileRules().GetRules()[0].GetLimit() != 10 {
		t.Fatalf("after a refresh: search's document %v, %v; want the seed", doc, err)
	}
}

// A service that seeded its documents seeds them again when they go from
// Redis (a restart without persistence, a failover to an empty replica, an
// invalid document an operator removed): until it restarted, `ratekit
// explain`, `clear` and the admin page found no document for its limiters.
// A service that never seeded leaves a document that went to whoever writes
// it, and logs that its limiters fell back to their local tiers (that went
// unsaid: the limiter's rules changed with no log line).
func TestSeedAgainWhenDocumentsGo(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	var logs testlog.Buffer
	s := newStore(t, c, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	search := newLimiter(t, "search", ratelimit.NewMemoryStore())
	if err := s.Bind(search, tiers.Set{File: []ratelimit.Rule{rule("by_user", 10)}}); err != nil {
		t.Fatal(err)
	}
	// Another service's limiter, whose document it reads and never seeds.
	var readerLogs testlog.Buffer
	reader := newStore(t, c, Options{Prefix: s.prefix, Logger: slog.New(slog.NewTextHandler(&readerLogs, nil))})
	projects := newLimiter(t, "projects", ratelimit.NewMemoryStore())
	if err := reader.Bind(projects, tiers.Set{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seed(ctx, map[string]tiers.Set{"projects": {File: []ratelimit.Rule{rule("by_user", 7)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SeedBound(ctx); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{s, reader} {
		if err := st.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}

	srv.Stop()
	srv.Restart(t) // Redis comes back empty
	for _, st := range []*Store{s, reader} {
		if err := st.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := c.Exists(ctx, s.Key("search")).Result(); err != nil || n != 1 {
		t.Fatalf("the seeded document that went was not seeded again: exists %d, %v\n%s", n, err, logs.String())
	}
	if !strings.Contains(logs.String(), "rate_limit_rule_store_seeded") || !strings.Contains(logs.String(), "seeded again") {
		t.Fatalf("the seed again was not logged:\n%s", logs.String())
	}
	if n, err := c.Exists(ctx, s.Key("projects")).Result(); err != nil || n != 0 {
		t.Fatalf("a store that never seeded wrote a document: exists %d, %v", n, err)
	}
	if !strings.Contains(readerLogs.String(), "rate_limit_rule_store_documents_gone") || !strings.Contains(readerLogs.String(), "documents gone from Redis (projects)") ||
		strings.Contains(logs.String(), "rate_limit_rule_store_documents_gone") {
		t.Fatalf("the reader's fall back to its local tiers was not logged, or the seeder's was:\nreader:\n%s\nseeder:\n%s", readerLogs.String(), logs.String())
	}
	if got := len(projects.Rules()); got != 0 {
		t.Fatalf("projects has %d rules after its document went, want its local tiers' 0", got)
	}
	// Once: the next refresh finds nothing new gone.
	readerLogs.Reset()
	if err := reader.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(readerLogs.String(), "documents_gone") {
		t.Fatalf("a refresh with nothing newly gone logged again:\n%s", readerLogs.String())
	}
	// The next refresh applies the document: nothing went, nothing is seeded.
	logs.Reset()
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "rate_limit_rule_store_seed") {
		t.Fatalf("a refresh with every document stored seeded:\n%s", logs.String())
	}
	if got := limitOf(t, search.Rules(), "by_user"); got != 10 {
		t.Fatalf("by_user %d after the seed again, want 10", got)
	}
}
