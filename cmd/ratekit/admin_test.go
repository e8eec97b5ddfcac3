package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	"github.com/ratekit/ratekit/internal/httpguard"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// startAdmin runs `ratekit admin` in-process on a free loopback port and
// returns its base URL, its stderr and a stop function giving the exit code.
func startAdmin(t *testing.T, args ...string) (string, *testlog.Buffer, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &testlog.Buffer{}, &testlog.Buffer{}
	codes := make(chan int, 1)
	go func() {
		codes <- run(ctx, append([]string{"admin", "--listen", "127.0.0.1:0"}, args...), output{stdout, stderr})
	}()
	re := regexp.MustCompile(`serving (http://[0-9.:\[\]]+/)`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := re.FindStringSubmatch(stdout.String()); m != nil {
			stopped := false
			stop := func() int {
				if !stopped {
					stopped = true
					cancel()
				}
				return <-codes
			}
			t.Cleanup(func() { cancel() })
			return m[1], stderr, stop
		}
		select {
		case code := <-codes:
			t.Fatalf("ratekit admin exited %d before serving:\n%s%s", code, stdout, stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ratekit admin did not start:\n%s%s", stdout, stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The subcommand serves the page against the Redis and files given: it lists
// the limiters, and with --writer a form save publishes (audited under that
// name); without --writer it is read-only.
func TestAdminCommand(t *testing.T) {
	client := redistest.Client(t)
	prefix := redistest.Prefix(t) + "{rules}:"
	dir := writeFiles(t, map[string]string{"available_limiters.yaml": readFixture(t, "available_limiters.yaml")})
	availablePath := filepath.Join(dir, "available_limiters.yaml")
	flags := []string{"--redis", redistest.URL(t), "--available-limiters", availablePath, "--rules-prefix", prefix,
		"--key-prefix", redistest.Prefix(t)}

	for _, tt := range []struct {
		name       string
		writer     []string
		wantStatus int
	}{
		{"read-only", nil, http.StatusForbidden},
		{"writer", []string{"--writer", "alice"}, http.StatusSeeOther},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base, stderr, stop := startAdmin(t, append(flags, tt.writer...)...)
			jar, _ := cookiejar.New(nil)
			hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := hc.Get(base + "?limiter=user_sign_in")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `<code id="limiter-name">user_sign_in</code>`) {
				t.Fatalf("page: %d\n%s", resp.StatusCode, body)
			}
			u, _ := url.Parse(base)
			var token string
			for _, c := range jar.Cookies(u) {
				if c.Name == "ratekit_admin_csrf" {
					token = c.Value
				}
			}
			form := url.Values{"csrf": {token}, "op": {"save"}, "limiter": {"user_sign_in"}, "version": {""}, "mode": {"add"},
				"name": {"from_cli_" + strings.ReplaceAll(tt.name, "-", "_")}, "action": {"limit"}, "limit": {"3"}, "period_s": {"60"}, "characteristics": {"ip"}}
			req, _ := http.NewRequest(http.MethodPost, base+"?limiter=user_sign_in", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", strings.TrimSuffix(base, "/"))
			resp, err = hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("save: %d, want %d\n%s", resp.StatusCode, tt.wantStatus, body)
			}
			if code := stop(); code != exitOK {
				t.Fatalf("exit %d after the interrupt\n%s", code, stderr)
			}
			available, err := config.LoadAvailableLimiters(availablePath)
			if err != nil {
				t.Fatal(err)
			}
			store, err := rulestore.New(client, rulestore.Options{Prefix: prefix, Available: available})
			if err != nil {
				t.Fatal(err)
			}
			doc, _, err := store.VersionedDocument(context.Background(), "user_sign_in")
			if err != nil {
				t.Fatal(err)
			}
			published := doc.GetPublishedRules().GetRules()
			if tt.writer == nil {
				if len(published) != 0 || strings.Contains(stderr.String(), "rate_limit_admin_write") {
					t.Fatalf("a read-only admin wrote: %v\n%s", published, stderr)
				}
				return
			}
			if len(published) != 1 || published[0].GetName() != "from_cli_writer" {
				t.Fatalf("published tier: %v", published)
			}
			if !strings.Contains(stderr.String(), `"msg":"rate_limit_admin_write","who":"alice","op":"publish"`) {
				t.Fatalf("no audit line naming alice:\n%s", stderr)
			}
		})
	}
}

func TestAdminUsage(t *testing.T) {
	// run reads the environment: an operator's RATEKIT_REDIS_URL would
	// give the first case the Redis it must miss.
	t.Setenv("RATEKIT_REDIS_URL", "")
	dir := writeFiles(t, map[string]string{"available_limiters.yaml": readFixture(t, "available_limiters.yaml")})
	avail := filepath.Join(dir, "available_limiters.yaml")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--available-limiters", avail}, "no Redis: give --redis URL or set RATEKIT_REDIS_URL"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--available-limiters", avail, "--service", "Bad-Name"}, `--service "Bad-Name" must match`},
		{[]string{"--redis", "redis://127.0.0.1:1"}, "admin needs --available-limiters FILE"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--available-limiters", avail, "--writer", "bob", "--listen", "0.0.0.0:0"}, "not a loopback address"},
		// There the page answers any Host, and a DNS-rebound page (Host and
		// Origin evil.example) published a skip rule as bob: the names are
		// needed too.
		{[]string{"--redis", "redis://127.0.0.1:1", "--available-limiters", avail, "--writer", "bob", "--listen", "0.0.0.0:0", "--allow-remote-writes"}, "needs --allowed-hosts"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--available-limiters", avail, "extra"}, "unexpected arguments"},
		// The name is on every page and in every audit record: bounded as
		// RATEKIT_WRITER is (the page served a 100 KiB name).
		{[]string{"--redis", "redis://127.0.0.1:1", "--available-limiters", avail, "--writer", strings.Repeat("w", maxWriterBytes+1)}, "--writer of 257 bytes, at most 256"},
	} {
		// Stopped already: a command that serves instead of refusing
		// exits 0 at once rather than holding the test.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var stdout, stderr bytes.Buffer
		if code := run(ctx, append([]string{"admin"}, tt.args...), output{&stdout, &stderr}); code != exitUsage || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, want %d with %q\n%s", tt.args, code, exitUsage, tt.want, stderr.String())
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:0": true, "localhost:80": true, "[::1]:9": true, "0.0.0.0:80": false, ":80": false, "10.0.0.1:80": false} {
		if got := httpguard.LoopbackAddr(addr); got != want {
			t.Errorf("loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// With writes on a non-loopback address (--allow-remote-writes, which needs
// --allowed-hosts) a request reaching it by another name, as a DNS-rebound
// page's does, is refused and writes nothing; the names given are served.
func TestAdminRemoteWritesCheckHost(t *testing.T) {
	var ip string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			ip = n.IP.String()
			break
		}
	}
	if ip == "" {
		t.Skip("this host has no non-loopback IPv4 address")
	}
	dir := writeFiles(t, map[string]string{"available_limiters.yaml": readFixture(t, "available_limiters.yaml")})
	prefix := redistest.Prefix(t) + "{rules}:"
	base, stderr, _ := startAdmin(t, "--redis", redistest.URL(t), "--available-limiters", filepath.Join(dir, "available_limiters.yaml"),
		"--rules-prefix", prefix, "--listen", "0.0.0.0:0", "--writer", "bob", "--allow-remote-writes", "--allowed-hosts", "admin.example")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	remote := "http://" + net.JoinHostPort(ip, u.Port()) + "/?limiter=user_sign_in"
	hc := &http.Client{Transport: &http.Transport{}} // never $HTTP_PROXY: the address is this host's
	defer hc.CloseIdleConnections()
	do := func(method, host string, body io.Reader) int {
		req, _ := http.NewRequest(method, remote, body)
		req.Host = host
		if body != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", "http://"+host)
			req.AddCookie(&http.Cookie{Name: "ratekit_admin_csrf", Value: strings.Repeat("A", 43)})
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := do(http.MethodGet, "admin.example:"+u.Port(), nil); got != http.StatusOK {
		t.Fatalf("GET as admin.example: %d, want 200", got)
	}
	form := url.Values{"csrf": {strings.Repeat("A", 43)}, "op": {"save"}, "limiter": {"user_sign_in"}, "version": {""}, "mode": {"add"},
		"name": {"rebound"}, "action": {"skip"}}
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(form.Encode())
		}
		if got := do(method, "evil.example:"+u.Port(), body); got != http.StatusForbidden {
			t.Errorf("%s as evil.example: %d, want 403", method, got)
		}
	}
	store, err := rulestore.New(redistest.Client(t), rulestore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	doc, _, err := store.VersionedDocument(context.Background(), "user_sign_in")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(doc.GetPublishedRules().GetRules()); n != 0 || !strings.Contains(stderr.String(), "rate_limit_admin_refused") {
		t.Fatalf("the rebound POST published %d rules, or was not logged as refused:\n%s", n, stderr)
	}
}

// Like every command that reaches Redis, admin reads RATEKIT_REDIS_URL and
// takes --service: the page then reads that service's rule documents.
func TestAdminEnvAndService(t *testing.T) {
	dir := writeFiles(t, map[string]string{"available_limiters.yaml": readFixture(t, "available_limiters.yaml")})
	service := fmt.Sprintf("adm%d", time.Now().UnixNano()) // a service of this run alone
	store, err := rulestore.New(redistest.Client(t), rulestore.Options{Prefix: "ratekit:rules:{" + service + "}:"})
	if err != nil {
		t.Fatal(err)
	}
	lim, per := uint32(7), uint32(60)
	if _, err := store.Publish(context.Background(), &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"user_sign_in": {Rules: []*configv1.Rule{
		{Name: "published_for_" + service, Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per, Characteristics: []string{"ip"}},
	}}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = store.Delete(context.Background(), "user_sign_in", "published_for_"+service) })
	t.Setenv("RATEKIT_REDIS_URL", redistest.URL(t))
	base, _, stop := startAdmin(t, "--service", service, "--available-limiters", filepath.Join(dir, "available_limiters.yaml"))
	defer stop()
	resp, err := http.Get(base + "?limiter=user_sign_in")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "published_for_"+service) {
		t.Fatalf("the page does not show the service's published rule: %d\n%s", resp.StatusCode, body)
	}
}

// The built binary stops cleanly on SIGTERM, as a container runtime stops
// it, and not only on an interrupt: exit 0, after its shutdown.
func TestAdminStopsOnSIGTERM(t *testing.T) {
	dir := writeFiles(t, map[string]string{"available_limiters.yaml": readFixture(t, "available_limiters.yaml")})
	cmd := exec.Command(binary(t), "admin", "--redis", redistest.URL(t), "--listen", "127.0.0.1:0",
		"--available-limiters", filepath.Join(dir, "available_limiters.yaml"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testlog.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, "serving http://") {
		_ = cmd.Process.Kill()
		t.Fatalf("ratekit admin did not start: %q %v\n%s", line, err, &stderr)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ratekit admin after SIGTERM: %v (want exit 0)\n%s", err, &stderr)
	}
}

// --allowed-hosts replaces the loopback names the page answers to, so that it
// can be reached by a name (through a proxy that keeps the Host); without it
// that name is refused as a DNS-rebound one would be.
func TestAdminAllowedHosts(t *testing.T) {
	dir := writeFiles(t, map[string]string{"available_limiters.yaml": readFixture(t, "available_limiters.yaml")})
	flags := []string{"--redis", redistest.URL(t), "--available-limiters", filepath.Join(dir, "available_limiters.yaml"),
		"--rules-prefix", redistest.Prefix(t) + "{rules}:"}
	for _, tt := range []struct {
		name  string
		flags []string
		want  map[string]int // Host: status
	}{
		{"default", nil, map[string]int{"admin.example": http.StatusForbidden, "localhost": http.StatusOK}},
		{"named", []string{"--allowed-hosts", "admin.example, localhost"},
			map[string]int{"admin.example": http.StatusOK, "localhost": http.StatusOK, "evil.example": http.StatusForbidden}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base, _, _ := startAdmin(t, append(flags, tt.flags...)...)
			for host, want := range tt.want {
				req, _ := http.NewRequest(http.MethodGet, base, nil)
				req.Host = host
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
				}
			}
		})
	}
}
