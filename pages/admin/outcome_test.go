package admin_test

import (
	"bytes"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/pages/admin"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// replyDropper is a TCP proxy to a Redis server. Once armed, a connection
// that sends one of the write commands (the rule store's write, a DEL)
// still has it run, but never receives another reply: the write happens and
// its caller times out, as when a network drops the answer.
type replyDropper struct {
	ln    net.Listener
	to    string
	armed atomic.Bool
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newReplyDropper(t *testing.T, to string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{ln: ln, to: to}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// writeCommands mark the commands whose replies an armed proxy drops: the
// rule store's write script (its plan names the op; its read script runs
// first and must answer) and a DEL (go-redis writes names in lower case).
var writeCommands = [][]byte{[]byte(`"op":"publish"`), []byte(`"op":"delete"`), []byte(`"op":"remove"`), []byte("$3\r\ndel\r\n")}

func (p *replyDropper) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		var dropping atomic.Bool
		p.wg.Add(2)
		go func() { // client to server
			defer p.wg.Done()
			defer s.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if p.armed.Load() && slices.ContainsFunc(writeCommands, func(cmd []byte) bool { return bytes.Contains(buf[:n], cmd) }) {
						dropping.Store(true)
					}
					if _, werr := s.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // server to client
			defer p.wg.Done()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && !dropping.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// A write whose reply is lost (Redis ran it; the page's call timed out) may
// have changed the rules or the counters: the page must not say that nothing
// was changed, must say how to find out, and must leave an audit record of
// the attempt. Each case proves on Redis itself that its write did happen.
func TestWriteOfUnknownOutcome(t *testing.T) {
	opt, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	p := newReplyDropper(t, opt.Addr)
	proxied := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), DB: opt.DB, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = proxied.Close() })
	f := newFixtureOn(t, proxied, allowAll, func(o *admin.Options) { o.Timeout = 2 * time.Second })
	direct := redistest.Client(t)
	store, err := rulestore.New(direct, rulestore.Options{Prefix: f.store.Key(""), Available: f.available, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, f)
	token := b.csrf()
	published := func(name string) bool {
		doc, err := store.Document(ctx, "api")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range doc.GetPublishedRules().GetRules() {
			if r.GetName() == name {
				return true
			}
		}
		return false
	}
	bob := ratelimit.Identifier{"ip": "192.0.2.7"}
	for _, tc := range []struct {
		op      string // the form's, and the audit's but for save (publish)
		prepare func(version string) url.Values
		done    func() bool // the write happened
	}{
		{"save", func(version string) url.Values { return saveForm(token, version, "lost_reply") },
			func() bool { return published("lost_reply") }},
		{"delete", func(string) url.Values {
			lim, per := uint32(3), uint32(60)
			if _, err := store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {Rules: []*configv1.Rule{
				{Name: "doomed", Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per}}}}}); err != nil {
				t.Fatal(err)
			}
			_, version, _ := store.VersionedDocument(ctx, "api")
			return url.Values{"csrf": {token}, "op": {"delete"}, "limiter": {"api"}, "version": {version}, "rule": {"doomed"}}
		}, func() bool { return !published("doomed") }},
		{"remove", func(string) url.Values {
			// A key of another type: a document no service would load.
			if err := direct.Del(ctx, store.Key("api")).Err(); err != nil {
				t.Fatal(err)
			}
			if err := direct.HSet(ctx, store.Key("api"), "published_rules", "x").Err(); err != nil {
				t.Fatal(err)
			}
			return url.Values{"csrf": {token}, "op": {"remove"}, "limiter": {"api"}, "confirm": {"yes"}}
		}, func() bool { return direct.Exists(ctx, store.Key("api")).Val() == 0 }},
		{"clear", func(string) url.Values {
			// The default rule per_ip counts bob: a counter key of the page's prefix.
			l := f.serviceLimiter(t, direct, ratelimit.Rule{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 100, Period: time.Minute})
			if res := l.Check(ctx, bob); res.Err != nil {
				t.Fatal(res.Err)
			}
			if n := len(direct.Keys(ctx, f.keyPrefix+"*").Val()); n == 0 {
				t.Fatal("the check left no counter key")
			}
			return url.Values{"csrf": {token}, "op": {"clear"}, "limiter": {"api"}, "confirm": {"yes"}, "id.ip": {"192.0.2.7"}}
		}, func() bool { return len(direct.Keys(ctx, f.keyPrefix+"*").Val()) == 0 }},
	} {
		t.Run(tc.op, func(t *testing.T) {
			_, version, _ := store.VersionedDocument(ctx, "api")
			form := tc.prepare(version)
			f.audit.Reset()
			p.armed.Store(true)
			resp, body := b.post("?limiter=api", form, f.srv.URL)
			p.armed.Store(false)
			if !tc.done() {
				t.Fatalf("the %s did not reach Redis (status %d): the test proves nothing\n%s", tc.op, resp.StatusCode, body)
			}
			if resp.StatusCode < 500 || strings.Contains(body, "Nothing was") || !strings.Contains(body, "may have been applied") {
				t.Fatalf("%s whose reply was lost: status %d, want a 5xx saying it may have been applied, not that nothing was:\n%s", tc.op, resp.StatusCode, body)
			}
			op := strings.Replace(tc.op, "save", "publish", 1)
			if a := f.audit.String(); !strings.Contains(a, `"msg":"rate_limit_admin_write"`) || !strings.Contains(a, `"outcome":"unknown: `) || !strings.Contains(a, `"op":"`+op+`"`) {
				t.Fatalf("no audit record of the %s of unknown outcome:\n%s", tc.op, a)
			}
		})
	}
}
