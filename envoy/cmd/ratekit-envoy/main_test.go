package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/servers"
	"github.com/ratekit/ratekit/internal/servers/serverstest"
	"github.com/ratekit/ratekit/internal/testlog"
)

// The binary on the example configuration and a real Redis: it seeds and
// loads the rules, answers Envoy's calls on a mapped domain, serves health,
// reflection and metrics, and drains on shutdown.
func TestServe(t *testing.T) {
	t.Run("standalone", func(t *testing.T) { testServe(t, redistest.Client(t), "-redis-url", redistest.URL(t)) })
	t.Run("cluster", func(t *testing.T) {
		addrs := redistest.ClusterAddrs(t)
		url := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
		testServe(t, redistest.ClusterClient(t), "-redis-url", url, "-redis-cluster")
	})
	t.Run("cluster_url", func(t *testing.T) { // several addr: a cluster without -redis-cluster
		testServe(t, redistest.ClusterClient(t), "-redis-url", redistest.ClusterURL(t))
	})
	t.Run("sentinel", func(t *testing.T) {
		testServe(t, redistest.SentinelClient(t), "-redis-url", redistest.SentinelURL(t))
	})
	t.Run("env", func(t *testing.T) {
		t.Setenv(envRedisURL, redistest.URL(t))
		testServe(t, redistest.Client(t))
	})
}

func testServe(t *testing.T, client redis.UniversalClient, redisFlags ...string) {
	prefix := redistest.Prefix(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type addrs struct{ grpc, http string }
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	var log testlog.Buffer
	go func() {
		done <- run(ctx, append([]string{
			"-available", "../../example/available_limiters.yaml",
			"-rate-limits", "../../example/rate_limits.yaml",
			"-key-prefix", prefix, "-rules-prefix", prefix + "{rules}:", "-seed",
			"-listen", "127.0.0.1:0", "-http", "127.0.0.1:0", "-domain", "gateway=edge", "-refresh", "100ms",
			"-timeout", "5s", // generous: the tests run on a loaded machine, under -race
			"-allowed-hosts", "127.0.0.1,gw.internal",
		}, redisFlags...), &log, func(g, h string) { ready <- addrs{g, h} })
	}()
	var a addrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("run returned before serving: %v\n%s", err, log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("not serving after 30s:\n%s", log.String())
	}
	// A client holds at most servers.MaxConcurrentStreams streams open on
	// one connection (the server had no bound).
	if n, ok := serverstest.MaxConcurrentStreams(t, a.grpc); !ok || n != servers.MaxConcurrentStreams {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d (set: %v), want %d", n, ok, servers.MaxConcurrentStreams)
	}
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()

	hc, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hc, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	refl, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	for _, s := range refl.GetListServicesResponse().GetService() {
		services = append(services, s.GetName())
	}
	if !strings.Contains(strings.Join(services, " "), "envoy.service.ratelimit.v3.RateLimitService") {
		t.Errorf("reflection lists %v", services)
	}

	// The file tier's per_user_writes (20 per minute) blocks the 21st POST.
	rls := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "gateway", Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
		{Key: "generic_key", Value: "api"}, {Key: "user", Value: "bob"}, {Key: "method", Value: "POST"},
	}}}}
	for i := 1; i <= 21; i++ {
		resp, err := rls.ShouldRateLimit(cctx, req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		want := rlsv3.RateLimitResponse_OK
		if i == 21 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if resp.GetOverallCode() != want {
			t.Fatalf("request %d: %v", i, resp)
		}
		if i == 21 && resp.GetStatuses()[0].GetCurrentLimit().GetName() != "per_user_writes" {
			t.Errorf("blocked by %v", resp.GetStatuses()[0].GetCurrentLimit())
		}
	}

	// An operator publishes a new rule: the server's replica picks it up at a
	// refresh (the published tier sits below rate_limits.yaml's, so it adds
	// a rule rather than overriding per_user_writes).
	avail, err := config.LoadAvailableLimiters("../../example/available_limiters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	store, err := rulestore.New(client, rulestore.Options{Prefix: prefix + "{rules}:", Available: avail})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := config.ParsePublishRulesRequest("publish.yaml", []byte(`
rate_limits:
  edge:
    - name: reads_frozen
      match: {generic_key: api, method: GET}
      characteristics: [user]
      limit: 1
      period_s: 60
      action: limit
`), avail)
	if err != nil {
		t.Fatal(err)
	}
	get := &rlsv3.RateLimitRequest{Domain: "gateway", Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
		{Key: "generic_key", Value: "api"}, {Key: "user", Value: "carol"}, {Key: "method", Value: "GET"},
	}}}}
	if resp, err := rls.ShouldRateLimit(cctx, get); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("carol's GET before the publish: %v %v", resp, err)
	}
	if _, err := store.Publish(cctx, pub); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := rls.ShouldRateLimit(cctx, get)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			if name := resp.GetStatuses()[0].GetCurrentLimit().GetName(); name != "reads_frozen" {
				t.Fatalf("blocked by %s, want reads_frozen", name)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the published rule did not apply within 10s: %v", resp)
		}
		time.Sleep(50 * time.Millisecond)
	}

	resp, err := http.Get("http://" + a.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`ratekit_envoy_requests_total{code="over_limit",domain="gateway"} 2`,
		`ratelimit_rule_evaluations_total{action="limit",rate_limiter="edge",result="block",rule="reads_frozen"} 1`,
		`ratelimit_rule_evaluations_total{action="limit",rate_limiter="edge",result="block",rule="per_user_writes"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	resp, err = http.Get("http://" + a.http + "/debug/ratelimit?format=json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`"edge"`, `"reads_frozen"`, `"per_user_writes"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/debug/ratelimit lacks %s:\n%s", want, body)
		}
	}
	// DNS rebinding: a hostile name resolved to 127.0.0.1 is refused the
	// page and the metrics on the loopback listener; a name -allowed-hosts
	// gives is served. /healthz answers whatever the name, as a probe by IP
	// (kubelet's Host is the pod's IP) must pass.
	for _, tt := range []struct {
		path, host, show string
		want             int
	}{
		{"/debug/ratelimit?format=json", "rebound.example", "reads_frozen", http.StatusForbidden},
		{"/debug/ratelimit?format=json", "gw.internal", "reads_frozen", http.StatusOK},
		{"/metrics", "rebound.example", "reads_frozen", http.StatusForbidden},
		{"/metrics", "gw.internal", "reads_frozen", http.StatusOK},
		{"/metrics", "127.0.0.1", "reads_frozen", http.StatusOK},
		{"/healthz", "10.0.0.5:9090", "ok", http.StatusOK},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.http+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tt.host
		if resp, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want || (tt.want == http.StatusOK) != strings.Contains(string(body), tt.show) {
			t.Errorf("%s with Host %s: %d, want %d\n%.300s", tt.path, tt.host, resp.StatusCode, tt.want, body)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no graceful stop within 30s")
	}
	if !strings.Contains(log.String(), "ratekit_envoy_stopped") {
		t.Errorf("log:\n%s", log.String())
	}
}

func TestUsageErrors(t *testing.T) {
	t.Setenv(envRedisURL, "") // the required -redis-url has no default here
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "-available is required"},
		{[]string{"-available", "x.yaml"}, "-redis-url (or $RATEKIT_REDIS_URL) is required"},
		{[]string{"-available", "x.yaml", "-redis-url", "redis://x", "-unknown-domain", "maybe"}, "-unknown-domain"},
		{[]string{"-available", "x.yaml", "-redis-url", "redis://x", "-domain", "nolimiter"}, "envoy_domain=limiter"},
		{[]string{"-available", "x.yaml", "-redis-url", "redis://x", "extra"}, "unexpected arguments"},
		// A duration that would be replaced by a default, or stop at once, is refused.
		{[]string{"-available", "x.yaml", "-redis-url", "redis://x", "-timeout", "0s"}, "-timeout 0s: want a positive duration"},
		{[]string{"-available", "x.yaml", "-redis-url", "redis://x", "-timeout", "-1s"}, "-timeout -1s: want a positive duration"},
		{[]string{"-available", "x.yaml", "-redis-url", "redis://x", "-refresh", "0s"}, "-refresh 0s: want a positive duration"},
		{[]string{"-available", "x.yaml", "-redis-url", "redis://x", "-drain", "-1s"}, "-drain -1s: want 0 or more"},
		// net.Listen takes "" for every interface and a random port.
		{[]string{"-available", "x.yaml", "-redis-url", "redis://x", "-listen", ""}, "-listen is empty: want host:port"},
	} {
		err := run(context.Background(), c.args, io.Discard, nil)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want a usage error with %q", c.args, err, c.want)
		}
	}
	if err := run(context.Background(), []string{"-h"}, io.Discard, nil); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp (exit 0)", err)
	}
	// A missing file is an error naming it, not a usage error.
	err := run(context.Background(), []string{"-available", "missing.yaml", "-redis-url", "redis://127.0.0.1:1"}, io.Discard, nil)
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// The built binary answers -version without its required flags.
func TestVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ratekit-envoy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "-version").Output()
	if err != nil || !strings.HasPrefix(string(out), "ratekit-envoy ") || !strings.Contains(string(out), "(go") {
		t.Fatalf("-version: %v, %q", err, out)
	}
	// The help is a result (stdout, exit 0); a usage error goes to stderr
	// with a hint, exit 2.
	for _, tt := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"-h"}, 0, "  -redis-url string\n", ""},
		{[]string{"--help"}, 0, "usage: ratekit-envoy -available FILE -redis-url URL [flags]\n", ""},
		{[]string{"help"}, 0, "usage: ratekit-envoy -available FILE -redis-url URL [flags]\n", ""},
		{[]string{"-redis-ulr", "redis://x"}, 2, "", "ratekit-envoy: usage: flag provided but not defined: -redis-ulr; did you mean -redis-url?\nrun 'ratekit-envoy -h' for the flags\n"},
	} {
		cmd := exec.Command(bin, tt.args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if err != nil && code <= 0 {
			t.Fatal(err)
		}
		if code != tt.code || !strings.Contains(stdout.String(), tt.stdout) || tt.stdout == "" && stdout.Len() > 0 ||
			tt.stderr != stderr.String() {
			t.Errorf("%q: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d, stdout with %q, stderr %q", tt.args, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
		}
	}
}

// A malformed -redis-url fails at start with an error that never shows the
// URL: it may hold a password.
func TestBadRedisURL(t *testing.T) {
	err := run(context.Background(), []string{"-available", "../../example/available_limiters.yaml", "-redis-url", "redis://u:s3cr%zz@h:1"}, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "-redis-url") || strings.Contains(err.Error(), "s3cr") {
		t.Fatalf("got %v, want an error about -redis-url without the password", err)
	}
}

// Every flag of -h, and -version, is documented in envoy/README.md, which
// tells operators how to run the binary.
func TestREADMENamesEveryFlag(t *testing.T) {
	_, err := parseFlags([]string{"-h"})
	var help *helpError
	if !errors.As(err, &help) {
		t.Fatalf("-h: %v", err)
	}
	if !strings.Contains(help.text, "ratekit-envoy -version") {
		t.Errorf("-h does not name -version:\n%s", help.text)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	flags := []string{"-version"}
	for _, line := range strings.Split(help.text, "\n") {
		if name, ok := strings.CutPrefix(line, "  -"); ok {
			name, _, _ = strings.Cut(name, " ")
			flags = append(flags, "-"+name)
		}
	}
	if len(flags) < 10 {
		t.Fatalf("found %v in the help", flags)
	}
	for _, f := range flags {
		// The flag as a word: -domain does not name -unknown-domain.
		if !regexp.MustCompile("(^|[\\s\\[`])" + regexp.QuoteMeta(f) + "($|[\\s\\]`])").Match(readme) {
			t.Errorf("envoy/README.md does not name %s", f)
		}
	}
}

// A gRPC connection that completed the HTTP/2 handshake and then sent
// nothing is closed, with GOAWAY, once idle for maxConnectionIdle
// (servers.MaxConnectionIdle; shortened here): it stayed open for good.
// A client that then calls again connects anew and is answered.
func TestIdleConnectionClosed(t *testing.T) {
	defer func(d time.Duration) { maxConnectionIdle = d }(maxConnectionIdle)
	maxConnectionIdle = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var log testlog.Buffer
	go func() {
		done <- run(ctx, []string{
			"-available", "../../example/available_limiters.yaml", "-rate-limits", "../../example/rate_limits.yaml",
			"-redis-url", redistest.URL(t), "-key-prefix", redistest.Prefix(t), "-listen", "127.0.0.1:0", "-timeout", "5s",
		}, &log, func(g, _ string) { ready <- g })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v\n%s", err, log.String())
		}
	})
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("run returned before serving: %v\n%s", err, log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("not serving after 30s:\n%s", log.String())
	}
	if !serverstest.IdleClosed(t, addr) {
		t.Fatal("the idle connection was closed without GOAWAY")
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	if _, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call after the idle close: %v", err)
	}
	// Idle means no call in flight: a connection holding a stream open
	// past the bound is not told to go away (GOAWAY would turn the
	// client's connection from READY to IDLE), and the stream still answers.
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(cctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * maxConnectionIdle)
	if st := conn.GetState(); st != connectivity.Ready {
		t.Fatalf("a connection with a call in flight is %v after 5 idle bounds, want READY", st)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("the stream held open: %v", err)
	}
	_ = stream.CloseSend()
}
