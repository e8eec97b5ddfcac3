package admin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// EnvChromium names the Chromium binary for the browser tests; the test
// command sets it (Debian's chromium package), so there they never skip.
const EnvChromium = "RATEKIT_TEST_CHROMIUM"

// EnvScreenshots, when set, is a directory the browser test writes
// screenshots of the page to (for a person to look at; they assert nothing).
const EnvScreenshots = "RATEKIT_TEST_ADMIN_SCREENSHOTS"

func (c *chrome) screenshot(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv(EnvScreenshots)
	if dir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), run(t, c, chromedp.FullScreenshot(100)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// chrome is a headless Chromium tab on a laptop-sized window, and the log
// messages the browser reported (Content-Security-Policy violations land
// there).
type chrome struct {
	ctx context.Context
	mu  sync.Mutex
	log []string
}

func newChrome(t *testing.T) *chrome {
	t.Helper()
	bin := os.Getenv(EnvChromium)
	if bin == "" {
		t.Skipf("%s is unset: apt-get install -y chromium and set %s=/usr/bin/chromium (scripts/test.sh does)", EnvChromium, EnvChromium)
	}
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("%s=%s: %v", EnvChromium, bin, err)
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1366, 768))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	cctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	c := &chrome{ctx: cctx}
	// The first call starts the browser; it must run on a context without a
	// deadline (the deadline would end the browser).
	if err := chromedp.Listen(cctx, func(ev any) {
		var text string
		switch ev := ev.(type) {
		case *log.EventEntryAdded:
			text = ev.Entry.Text
		case log.EventEntryAdded:
			text = ev.Entry.Text
		default:
			return
		}
		c.mu.Lock()
		c.log = append(c.log, text)
		c.mu.Unlock()
	}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if _, err := chromedp.Call(cctx, log.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("chromium: enable the log: %v", err)
	}
	return c
}

// do runs steps with a generous deadline (the machine may be loaded).
func (c *chrome) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("chromium: %v", err)
	}
}

func run[T any](t *testing.T, c *chrome, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return v
}

// submit clicks the button sel and waits until the page it leads to loads.
func (c *chrome) submit(t *testing.T, sel string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 60*time.Second)
	defer cancel()
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		t.Fatalf("chromium: submit %s: %v", sel, err)
	}
}

func (c *chrome) text(t *testing.T, sel string) string {
	t.Helper()
	return run(t, c, chromedp.Text(chromedp.CSS(sel)))
}

func (c *chrome) exists(t *testing.T, sel string) bool {
	t.Helper()
	return run(t, c, chromedp.Evaluate[int](`document.querySelectorAll(`+jsString(sel)+`).length`)) > 0
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func (c *chrome) cspViolations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range c.log {
		if strings.Contains(l, "Content Security Policy") {
			out = append(out, l)
		}
	}
	return out
}

// fillRule types a rule into the page's editor.
func fillRule(name, limit, period, ban string, chars ...string) chromedp.Action[chromedp.Void] {
	steps := []chromedp.Action[chromedp.Void]{
		chromedp.WaitVisible(chromedp.CSS(`#rule-form`)),
		chromedp.SetValue(chromedp.CSS(`#f-name`), name),
		chromedp.SetValue(chromedp.CSS(`#f-action`), "limit"),
		chromedp.SetValue(chromedp.CSS(`#f-limit`), limit),
		chromedp.SetValue(chromedp.CSS(`#f-period`), period),
		chromedp.SetValue(chromedp.CSS(`#f-ban`), ban),
		chromedp.SetValue(chromedp.CSS(`#f-description`), "set in the browser test"),
	}
	for _, ch := range chars {
		steps = append(steps, chromedp.Click(chromedp.CSS(`#rule-form input[name=characteristics][value=`+ch+`]`)))
	}
	return chromedp.Steps(steps...)
}

// The page in a real browser: publish a rule through the form and see it
// listed; an invalid rule gets its inline error and writes nothing; a
// concurrent change gives the conflict message; a limiter refreshing from
// the same Redis enforces the published rule; lifting the ban lets the next
// check through.
func TestChromium(t *testing.T) {
	f := newFixture(t, allowAll)
	c := newChrome(t)
	page := f.url() + "?limiter=api"

	// A service's limiter, bound to the same rule store, refreshing often.
	service, err := rulestore.New(f.client, rulestore.Options{Prefix: f.store.Key(""), Available: f.available,
		Interval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	limiter := f.serviceLimiter(t, f.client)
	if err := service.Bind(limiter, tiers.Set{}); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go service.Run(sctx)

	t.Run("publish", func(t *testing.T) {
		c.do(t, chromedp.Navigate(page), fillRule("login_ban", "1", "60", "3600", "user"),
			chromedp.Click(chromedp.CSS(`#save`)), chromedp.WaitVisible(chromedp.CSS(`#message`)))
		if msg := c.text(t, `#message`); !strings.Contains(msg, "Published rule login_ban") {
			t.Fatalf("message %q", msg)
		}
		if !c.exists(t, `table.rules tr[data-rule=login_ban][data-tier=published]`) || !c.exists(t, `#published tr[data-rule=login_ban]`) {
			t.Fatal("the published rule is not listed")
		}
		doc, err := f.store.Document(ctx, "api")
		if err != nil {
			t.Fatal(err)
		}
		got := doc.GetPublishedRules().GetRules()
		if len(got) != 1 || got[0].GetName() != "login_ban" || got[0].GetLimit() != 1 || got[0].GetBanForS() != 3600 ||
			!slices.Equal(got[0].GetCharacteristics(), []string{"user"}) || got[0].GetAction() != configv1.Action_ACTION_LIMIT {
			t.Fatalf("stored published tier: %v", got)
		}
	})

	t.Run("invalid rule", func(t *testing.T) {
		before := f.storeState(t)
		c.do(t, chromedp.Navigate(page), fillRule("zero_limit", "0", "60", "", "ip"),
			chromedp.Click(chromedp.CSS(`#save`)), chromedp.WaitVisible(chromedp.CSS(`[data-error-for=limit] li`)))
		if msg := c.text(t, `[data-error-for=limit] li`); !strings.Contains(msg, "limit must be at least 1") {
			t.Fatalf("inline error %q", msg)
		}
		c.screenshot(t, "invalid")
		if invalid := run(t, c, chromedp.AttributeValue(chromedp.CSS(`#f-limit`), "aria-invalid")).Value; invalid != "true" {
			t.Fatalf("the limit input is not marked invalid (aria-invalid=%q)", invalid)
		}
		if after := f.storeState(t); !mapsEqual(before, after) {
			t.Fatalf("an invalid rule wrote to Redis:\nbefore %v\nafter  %v", before, after)
		}
	})

	t.Run("concurrent edit", func(t *testing.T) {
		c.do(t, chromedp.Navigate(page), fillRule("mine", "5", "60", "", "ip"))
		// Another writer publishes while the form is open.
		lim, per := uint32(9), uint32(60)
		if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {Rules: []*configv1.Rule{
			{Name: "theirs", Action: configv1.Action_ACTION_LOG, Limit: &lim, PeriodS: &per, Characteristics: []string{"path"}}}}}}); err != nil {
			t.Fatal(err)
		}
		before := f.storeState(t)
		c.do(t, chromedp.Click(chromedp.CSS(`#save`)), chromedp.WaitVisible(chromedp.CSS(`#conflict`)))
		c.screenshot(t, "conflict")
		if msg := c.text(t, `#conflict`); !strings.Contains(msg, "Someone else changed the rules of this limiter") {
			t.Fatalf("conflict message %q", msg)
		}
		if !c.exists(t, `#published tr[data-rule=theirs]`) || c.exists(t, `#published tr[data-rule=mine]`) {
			t.Fatal("the page does not show the current published rules")
		}
		if kept := run(t, c, chromedp.Value(chromedp.CSS(`#f-name`))); kept != "mine" {
			t.Fatalf("the form lost what was typed: name %q", kept)
		}
		if after := f.storeState(t); !mapsEqual(before, after) {
			t.Fatal("the conflicting save wrote to Redis")
		}
	})

	bob := ratelimit.Identifier{"user": "bob", "ip": "192.0.2.1"}
	t.Run("running limiter enforces", func(t *testing.T) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			res := limiter.Check(ctx, bob)
			if res.Blocked() && res.Rule != nil && res.Rule.Name == "login_ban" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the service's limiter never blocked by the published rule; last result %+v", res)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("lift ban", func(t *testing.T) {
		c.do(t, chromedp.Navigate(page),
			chromedp.SetValue(chromedp.CSS(`#id-user`), "bob"), chromedp.SetValue(chromedp.CSS(`#id-ip`), "192.0.2.1"),
			chromedp.Click(chromedp.CSS(`#explain`)), chromedp.WaitVisible(chromedp.CSS(`#verdict`)))
		if v := c.text(t, `#verdict`); !strings.Contains(v, "block by login_ban") || !c.exists(t, `.explain tr[data-rule=login_ban][data-state=banned]`) {
			t.Fatalf("explain before the lift: %q", v)
		}
		c.screenshot(t, "explain")
		// Explaining counted nothing: the service is still blocked, by the ban.
		c.do(t, chromedp.Click(chromedp.CSS(`#clear`)), chromedp.WaitVisible(chromedp.CSS(`#clear-form`)))
		if !strings.Contains(c.text(t, `#clear-form`), "user=bob") {
			t.Fatal("the confirmation does not name the identifier")
		}
		if res := limiter.Peek(ctx, bob); !res.Blocked() {
			t.Fatal("the confirmation step cleared already")
		}
		c.do(t, chromedp.Click(chromedp.CSS(`#confirm-clear`)), chromedp.WaitVisible(chromedp.CSS(`#message`)))
		if msg := c.text(t, `#message`); !strings.Contains(msg, "Cleared") {
			t.Fatalf("message %q", msg)
		}
		// The page clears through its own limiter: the service's limiter sees
		// it once its cached ban ages out (BlockedCacheConfig.MaxAge, 1s).
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			res := limiter.Check(ctx, bob)
			if !res.Blocked() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the service's limiter is still blocked 15s after lifting the ban: %+v", res)
			}
		}
		if !strings.Contains(f.audit.String(), `"op":"clear"`) {
			t.Fatalf("no audit line for the clear: %s", f.audit)
		}
	})

	t.Run("invalid document", func(t *testing.T) {
		// The document key turned into a hash: the service keeps its last
		// good rules, and the page offers to remove it.
		// In one transaction: a refresh between a DEL and an HSET would see
		// no document, which rightly drops the published rules.
		key := f.store.Key("api")
		if _, err := f.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, key)
			p.HSet(ctx, key, "published_rules", "x")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := service.RefreshStatus("api"); errors.Is(err, rulestore.ErrInvalidDocument) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the service never rejected the hash")
			}
		}
		if !slices.ContainsFunc(limiter.Rules(), func(r ratelimit.Rule) bool { return r.Name == "login_ban" }) {
			t.Fatal("the service dropped its published rules")
		}
		c.do(t, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS(`#document-error`)))
		if msg := c.text(t, `#document-error`); !strings.Contains(msg, "is a Redis hash, not a string") {
			t.Fatalf("document error %q", msg)
		}
		c.screenshot(t, "invalid-document")
		c.do(t, chromedp.Click(chromedp.CSS(`#confirm-remove`)), chromedp.WaitVisible(chromedp.CSS(`#message`)))
		if msg := c.text(t, `#message`); !strings.Contains(msg, "Removed the invalid document") || c.exists(t, `#remove-form`) {
			t.Fatalf("message %q", msg)
		}
		if n, _ := f.client.Exists(ctx, key).Result(); n != 0 {
			t.Fatal("the key is still there")
		}
		c.do(t, chromedp.Navigate(page), fillRule("after_removal", "4", "60", "", "ip"),
			chromedp.Click(chromedp.CSS(`#save`)), chromedp.WaitVisible(chromedp.CSS(`#message`)))
		if msg := c.text(t, `#message`); !strings.Contains(msg, "Published rule after_removal") {
			t.Fatalf("save after the removal: %q", msg)
		}
		if !strings.Contains(f.audit.String(), `"op":"remove"`) {
			t.Fatalf("no audit line for the removal: %s", f.audit)
		}
	})

	if v := c.cspViolations(); len(v) > 0 {
		t.Fatalf("the browser reported Content-Security-Policy violations: %v", v)
	}
	if c.exists(t, `script`) {
		t.Fatal("the page holds a script element")
	}

	// The check above can fail: the page's own policy, on a page with an
	// inline script, is reported by this browser as a violation.
	resp, err := http.Get(page)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Fatalf("Content-Security-Policy %q", csp)
	}
	probe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", csp)
		_, _ = io.WriteString(w, `<!doctype html><title>probe</title><script>document.title="ran"</script>`)
	}))
	defer probe.Close()
	c.do(t, chromedp.Navigate(probe.URL))
	deadline := time.Now().Add(15 * time.Second)
	for len(c.cspViolations()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the browser never reported the probe's inline script: the Content-Security-Policy check above is blind")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if title := run(t, c, chromedp.Title()); title == "ran" {
		t.Fatal("the policy let an inline script run")
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A published rule opened in the editor and saved untouched in a real
// browser is stored unchanged, line breaks included: a browser sends a
// textarea's line breaks as CR LF and drops one right after the start tag.
func TestChromiumEditKeepsRule(t *testing.T) {
	f := newFixture(t, allowAll)
	c := newChrome(t)
	lim, per := uint32(5), uint32(60)
	rule := &configv1.Rule{Name: "multiline", Description: "first line\nsecond line", Action: configv1.Action_ACTION_LIMIT,
		Limit: &lim, PeriodS: &per, Match: map[string]*configv1.MatchValue{
			"path": {Kind: &configv1.MatchValue_Equality{Equality: "\n/starts/with/a/line/break"}},
			"user": {Kind: &configv1.MatchValue_Regex{Regex: "^a\nb$"}},
		}}
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {Rules: []*configv1.Rule{rule}}}}); err != nil {
		t.Fatal(err)
	}
	c.do(t, chromedp.Navigate(f.url()+"?limiter=api&edit=multiline"), chromedp.WaitVisible(chromedp.CSS(`#rule-form`)),
		chromedp.Click(chromedp.CSS(`#save`)), chromedp.WaitVisible(chromedp.CSS(`#message`)))
	doc, err := f.store.Document(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	if got := doc.GetPublishedRules().GetRules(); len(got) != 1 || !proto.Equal(got[0], rule) {
		t.Fatalf("saved untouched, the rule changed:\nwas %v\nnow %v\n(message %q)", rule, got, c.text(t, `#message`))
	}
}

// A one_of whose values the API and the CLI can publish but one plain line
// each cannot hold (a line break, a CR, blanks at either end, the empty
// string, a leading quote, a NUL), opened in a real browser and saved
// untouched, is stored byte for byte as it was.
func TestChromiumEditKeepsOneOf(t *testing.T) {
	f := newFixture(t, allowAll)
	c := newChrome(t)
	lim, per := uint32(5), uint32(60)
	rule := &configv1.Rule{Name: "odd_values", Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per,
		Match: map[string]*configv1.MatchValue{"path": {Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: []string{
			"/plain", "two\nlines", " padded ", "", `"quoted"`, "cr\rhere", "tab\there", "nul\x00here", `back\slash`, "\u00a0nbsp",
		}}}}}}
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {Rules: []*configv1.Rule{rule}}}}); err != nil {
		t.Fatal(err)
	}
	want, err := config.MarshalRule(rule)
	if err != nil {
		t.Fatal(err)
	}
	c.do(t, chromedp.Navigate(f.url()+"?limiter=api&edit=odd_values"), chromedp.WaitVisible(chromedp.CSS(`#rule-form`)),
		chromedp.Click(chromedp.CSS(`#save`)), chromedp.WaitVisible(chromedp.CSS(`#message, #form-errors, [data-error-for] li`)))
	c.screenshot(t, "one-of")
	doc, err := f.store.Document(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	got := doc.GetPublishedRules().GetRules()
	if len(got) != 1 {
		t.Fatalf("published tier after the save: %v", got)
	}
	if b, err := config.MarshalRule(got[0]); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("saved untouched, the rule changed:\nwas %s\nnow %s (%v)\npage says %q", want, b, err, c.text(t, `main`))
	}
}

// A rule whose description, equality or regex holds a CR or a NUL (the API
// and the CLI publish them; HTML reads a CR as a line break and a NUL as
// U+FFFD, so no text box carries them) is not offered for editing: the
// page says why, and a save from it changes nothing stored.
func TestChromiumEditRefusesUnshowable(t *testing.T) {
	f := newFixture(t, allowAll)
	c := newChrome(t)
	lim, per := uint32(5), uint32(60)
	for _, tc := range []struct {
		name, field string
		rule        *configv1.Rule
	}{
		{"crlf_description", "description", &configv1.Rule{Description: "written on Windows\r\nsecond line"}},
		{"cr_equality", "match path", &configv1.Rule{Match: map[string]*configv1.MatchValue{
			"path": {Kind: &configv1.MatchValue_Equality{Equality: "a\rb"}}}}},
		{"nul_regex", "match user", &configv1.Rule{Match: map[string]*configv1.MatchValue{
			"user": {Kind: &configv1.MatchValue_Regex{Regex: "^a\x00b$"}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := tc.rule
			rule.Name, rule.Action, rule.Limit, rule.PeriodS = tc.name, configv1.Action_ACTION_LIMIT, &lim, &per
			if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {Rules: []*configv1.Rule{rule}}}}); err != nil {
				t.Fatal(err)
			}
			want, err := config.MarshalRule(rule)
			if err != nil {
				t.Fatal(err)
			}
			c.do(t, chromedp.Navigate(f.url()+"?limiter=api&edit="+tc.name), chromedp.WaitVisible(chromedp.CSS(`#rule-form`)))
			editing := c.exists(t, `#rule-form input[name=mode][value=edit]`)
			msg := ""
			if c.exists(t, `#message`) {
				msg = c.text(t, `#message`)
			}
			// Saved untouched, whatever form the page offers; the refusal's
			// #message is there before the click, so wait for the answer.
			c.submit(t, `#save`)
			doc, err := f.store.Document(ctx, "api")
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			for _, r := range doc.GetPublishedRules().GetRules() {
				if r.GetName() == tc.name {
					got, _ = config.MarshalRule(r)
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("saved untouched, the rule changed:\nwas %s\nnow %s", want, got)
			}
			if editing || !strings.Contains(msg, "cannot be edited on this page: its "+tc.field) {
				t.Fatalf("the page offers the rule for editing (%v) or does not say why not: %q", editing, msg)
			}
		})
	}
}

// A rule whose untouched editor a browser would send in more than
// admin.MaxBodyBytes (a one_of of long values the API published) is not
// offered for editing, with the reason: a save could only be refused with
// 413, losing what was typed. A rule whose form fits is still offered and
// saves unchanged.
func TestChromiumEditRefusesOversizedForm(t *testing.T) {
	f := newFixture(t, allowAll)
	c := newChrome(t)
	lim, per := uint32(5), uint32(60)
	for _, tc := range []struct {
		name     string
		values   int // of 2000 bytes each
		editable bool
	}{
		{"fits", 30, true},
		{"too_large", 40, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := make([]string, tc.values)
			for i := range vals {
				vals[i] = fmt.Sprintf("/%04d/", i) + strings.Repeat("a", 1994)
			}
			rule := &configv1.Rule{Name: tc.name, Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per,
				Match: map[string]*configv1.MatchValue{"path": {Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: vals}}}}}
			if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {Rules: []*configv1.Rule{rule}}}}); err != nil {
				t.Fatal(err)
			}
			want, err := config.MarshalRule(rule)
			if err != nil {
				t.Fatal(err)
			}
			c.do(t, chromedp.Navigate(f.url()+"?limiter=api&edit="+tc.name), chromedp.WaitVisible(chromedp.CSS(`#rule-form`)))
			editing := c.exists(t, `#rule-form input[name=mode][value=edit]`)
			if editing != tc.editable {
				t.Fatalf("editor offered: %v, want %v (%q)", editing, tc.editable, c.text(t, `main`))
			}
			if !tc.editable {
				if msg := c.text(t, `#message`); !strings.Contains(msg, "too large to edit on this page") || !strings.Contains(msg, "at most 65536") {
					t.Fatalf("message %q", msg)
				}
				return
			}
			c.do(t, chromedp.Click(chromedp.CSS(`#save`)), chromedp.WaitVisible(chromedp.CSS(`#message, #error, #form-errors`)))
			doc, err := f.store.Document(ctx, "api")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range doc.GetPublishedRules().GetRules() {
				if got, _ := config.MarshalRule(r); r.GetName() == tc.name && !bytes.Equal(got, want) {
					t.Fatalf("saved untouched, the rule changed (%q)", c.text(t, `main`))
				}
			}
			if msg := c.text(t, `#message`); !strings.Contains(msg, "Rule "+tc.name+" is unchanged") {
				t.Fatalf("the save of a form that fits failed: %q", msg)
			}
		})
	}
}

// A rule counts by its characteristics in their order (they make its
// counter keys): saved untouched from a real browser, a rule the API
// published with [user ip], against available_properties [ip user path],
// keeps that order, and so its counters and bans.
func TestChromiumEditKeepsCharacteristicsOrder(t *testing.T) {
	f := newFixture(t, allowAll)
	c := newChrome(t)
	lim, per, ban := uint32(5), uint32(60), uint32(600)
	rule := &configv1.Rule{Name: "user_then_ip", Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per, BanForS: &ban,
		Characteristics: []string{"user", "ip"}}
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {Rules: []*configv1.Rule{rule}}}}); err != nil {
		t.Fatal(err)
	}
	want, err := config.MarshalRule(rule)
	if err != nil {
		t.Fatal(err)
	}
	c.do(t, chromedp.Navigate(f.url()+"?limiter=api&edit=user_then_ip"), chromedp.WaitVisible(chromedp.CSS(`#rule-form`)),
		chromedp.Click(chromedp.CSS(`#save`)), chromedp.WaitVisible(chromedp.CSS(`#message, #form-errors, [data-error-for] li`)))
	doc, err := f.store.Document(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	got := doc.GetPublishedRules().GetRules()
	if len(got) != 1 {
		t.Fatalf("published tier after the save: %v", got)
	}
	if b, err := config.MarshalRule(got[0]); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("saved untouched, the rule changed (its counter keys with it):\nwas %s\nnow %s (%v)", want, b, err)
	}
}

// A rule stored with a value spelled out that the editor shows as its
// default (algorithm fixed_window, which the form's select shows as it
// shows an unset algorithm), or in another writer's spelling (explicit
// zero values, other member order, a published mode), opened in a real
// browser and saved untouched, leaves the stored document byte for byte as
// it was: a save the operator did not edit changes nothing, and the page
// says so rather than that it published.
func TestChromiumEditKeepsSpelling(t *testing.T) {
	f := newFixture(t, allowAll)
	c := newChrome(t)
	lim, per := uint32(5), uint32(60)
	explicit := &configv1.Rule{Name: "explicit_fixed", Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per,
		Characteristics: []string{"ip"}, Algorithm: configv1.Algorithm_ALGORITHM_FIXED_WINDOW}
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {Rules: []*configv1.Rule{explicit}}}}); err != nil {
		t.Fatal(err)
	}
	// Another SDK's spelling of two rules and of the published tier, which
	// the store keeps as written.
	canonical, _, err := f.store.RawDocument(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	other := `{"name":"zeros","description":"","limit":5,"period_s":60,"action":"limit","characteristics":["ip"],"count_missing":false,"count_distinct":"","match":{}},` +
		`{"action": "log", "name": "reordered", "period_s": 60, "limit": 7, "characteristics": ["user"], "match": {"path": "/login"}}`
	at := strings.LastIndex(canonical, "]}}")
	doc := strings.Replace(canonical[:at], `"published_rules":{"rules":[`, `"published_rules":{"mode":"enforce","rules":[`, 1) + "," + other + canonical[at:]
	for _, name := range []string{"explicit_fixed", "zeros", "reordered"} {
		t.Run(name, func(t *testing.T) {
			if err := f.client.Set(ctx, f.store.Key("api"), doc, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if d, err := f.store.Document(ctx, "api"); err != nil || len(d.GetPublishedRules().GetRules()) != 3 {
				t.Fatalf("the document written in another spelling: %v (%v)", d, err)
			}
			c.do(t, chromedp.Navigate(f.url()+"?limiter=api&edit="+name), chromedp.WaitVisible(chromedp.CSS(`#rule-form`)))
			if !c.exists(t, `#rule-form input[name=mode][value=edit]`) {
				t.Fatalf("rule %s is not offered for editing: %q", name, c.text(t, `main`))
			}
			c.do(t, chromedp.Click(chromedp.CSS(`#save`)), chromedp.WaitVisible(chromedp.CSS(`#message, #error, #form-errors, [data-error-for] li`)))
			if now, _, err := f.store.RawDocument(ctx, "api"); err != nil || now != doc {
				t.Fatalf("saved untouched, the document changed:\nwas %s\nnow %s (%v)\npage says %q", doc, now, err, c.text(t, `main`))
			}
			if msg := c.text(t, `#message`); !strings.Contains(msg, "Rule "+name+" is unchanged") {
				t.Fatalf("message %q", msg)
			}
		})
	}
}

// Removing an invalid document is a compare-and-set on the document the
// page showed: when another writer replaced it meanwhile, with a valid
// document or another invalid one, the remove in a real browser takes
// nothing, says why, shows the document as it is now, and is audited.
func TestChromiumRemoveIsConditional(t *testing.T) {
	f := newFixture(t, allowAll)
	c := newChrome(t)
	key := f.store.Key("api")
	valid, _, err := f.store.RawDocument(ctx, "api") // the seeded document
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, replacement string }{
		{"replaced by a valid document", valid},
		{"replaced by another invalid document", "not json either"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := f.client.Set(ctx, key, "not json", 0).Err(); err != nil {
				t.Fatal(err)
			}
			c.do(t, chromedp.Navigate(f.url()+"?limiter=api"), chromedp.WaitVisible(chromedp.CSS(`#remove-form`)))
			if err := f.client.Set(ctx, key, tc.replacement, 0).Err(); err != nil {
				t.Fatal(err)
			}
			f.audit.Reset()
			c.submit(t, `#confirm-remove`)
			if now, err := f.client.Get(ctx, key).Result(); err != nil || now != tc.replacement {
				t.Fatalf("the remove took the document another writer put there: now %q (%v)", now, err)
			}
			if msg := c.text(t, `main`); !strings.Contains(msg, "Nothing was removed: the document of limiter api changed since this page showed it") {
				t.Fatalf("the page does not say why nothing was removed: %q", msg)
			}
			var audited bool
			for _, line := range strings.Split(f.audit.String(), "\n") {
				audited = audited || strings.Contains(line, `"op":"remove"`) && strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, "conflict")
			}
			if !audited {
				t.Fatalf("no audit record of the refused remove:\n%s", f.audit)
			}
		})
	}
}

// An identifier value that reads as another (a bidi override, a zero-width
// space) is shown quoted in the explanation and the clear's confirmation,
// which a crafted link opens: "\u202eecila" read "user=alice" there. The
// clear still sends the value itself.
func TestChromiumIdentifierShownUnambiguously(t *testing.T) {
	f := newFixture(t, allowAll)
	c := newChrome(t)
	const value = "\u202eecila"
	c.do(t, chromedp.Navigate(f.url()+"?limiter=api&clear=1&id.user="+url.QueryEscape(value)+"&id.ip="+url.QueryEscape("192.0.2.1\u200b")),
		chromedp.WaitVisible(chromedp.CSS(`#clear-form`)))
	for _, sel := range []string{`#clear-form`, `#explanation`} {
		text := c.text(t, sel)
		if strings.ContainsAny(text, "\u202e\u200b") || !strings.Contains(text, `user="\u202eecila"`) || !strings.Contains(text, `ip="192.0.2.1\u200b"`) {
			t.Errorf("%s shows the identifier as %q, want each value quoted with its hidden character escaped", sel, text)
		}
	}
	c.do(t, chromedp.Click(chromedp.CSS(`#confirm-clear`)), chromedp.WaitVisible(chromedp.CSS(`#message`)))
	if a := f.audit.String(); !strings.Contains(a, `"op":"clear"`) || !strings.Contains(a, value) {
		t.Fatalf("the clear did not send the value itself:\n%s", a)
	}
}
