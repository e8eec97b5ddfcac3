package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	"github.com/ratekit/ratekit/internal/httpguard"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/servers"
	"github.com/ratekit/ratekit/internal/servers/serverstest"
)

// startServe runs serve with extra flags on loopback port 0 against the
// real Redis, returning its HTTP address; it stops with the test.
func startServe(t *testing.T, extra ...string) string {
	t.Helper()
	return startServeAddrs(t, extra...)[1]
}

// startServeAddrs is startServe returning the gRPC and HTTP addresses.
func startServeAddrs(t *testing.T, extra ...string) [2]string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	args := append([]string{"serve", "-redis", redistest.URL(t), "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0", "-key-prefix", redistest.Prefix(t)}, extra...)
	go func() { done <- run(ctx, args, io.Discard, func(g, h string) { addrs <- [2]string{g, h} }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop within 30s")
		}
	})
	select {
	case a := <-addrs:
		return a
	case err := <-done:
		t.Fatalf("serve ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not listen within 30s")
	}
	return [2]string{}
}

// One client connection holds at most servers.MaxConcurrentStreams streams
// open: the server set no bound, and streams that never sent their request
// held a goroutine each.
func TestGRPCStreamsBounded(t *testing.T) {
	if n, ok := serverstest.MaxConcurrentStreams(t, startServeAddrs(t)[0]); !ok || n != servers.MaxConcurrentStreams {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d (set: %v), want %d", n, ok, servers.MaxConcurrentStreams)
	}
}

// A gRPC connection that completed the HTTP/2 handshake and then sent
// nothing is closed, with GOAWAY, once idle for maxConnectionIdle
// (servers.MaxConnectionIdle; shortened here): it stayed open for good.
// A client that then calls again connects anew and is answered.
func TestGRPCIdleConnectionClosed(t *testing.T) {
	defer func(d time.Duration) { maxConnectionIdle = d }(maxConnectionIdle)
	maxConnectionIdle = 100 * time.Millisecond
	addr := startServeAddrs(t)[0]
	if !serverstest.IdleClosed(t, addr) {
		t.Fatal("the idle connection was closed without GOAWAY")
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := rulesv1.NewRulesServiceClient(conn).GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"}); err != nil {
		t.Fatalf("a call after the idle close: %v", err)
	}
}

// A gRPC request is bounded as its HTTP form (POST /v1/rules) is, by
// rulesserver.MaxDocumentBytes: a larger one is refused before it is
// decoded, not decoded whole and then found invalid (the largest valid
// request is a few hundred KiB).
func TestGRPCRequestBounded(t *testing.T) {
	conn, err := grpc.NewClient(startServeAddrs(t)[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rpc := rulesv1.NewRulesServiceClient(conn)
	ctx := context.Background()
	id := map[string]string{}
	for i := range 300 { // 300 values of 4 KiB: about 1.2 MiB, over the bound
		id[fmt.Sprintf("p%d", i)] = strings.Repeat("v", 4096)
	}
	_, err = rpc.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request", Identifier: id})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("GetRules of about 1.2 MiB: %v, want ResourceExhausted", err)
	}
	if _, err := rpc.GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request"}); err != nil {
		t.Fatalf("a small request after the refusal: %v", err)
	}
}

func TestServeListensOnLoopbackByDefault(t *testing.T) {
	for _, a := range []string{defaultGRPCAddr, defaultHTTPAddr} {
		if !httpguard.LoopbackAddr(a) {
			t.Errorf("default listen address %s is not loopback", a)
		}
	}
}

// An empty -grpc or -http is refused: net.Listen("tcp", "") listened on
// every interface, on a random port ([::]:40475), the management API among
// them, where ratekit-envoy's -http "" means none.
func TestServeRefusesEmptyAddress(t *testing.T) {
	for _, flag := range []string{"-grpc", "-http"} {
		// Stopped already: a serve that listens instead of refusing
		// returns at once rather than holding the test.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := run(ctx, []string{"serve", "-redis", redistest.URL(t), flag, ""}, io.Discard, nil)
		if !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), "an empty one would listen on every interface") {
			t.Errorf("serve %s \"\": %v, want a usage error", flag, err)
		}
	}
}

// A PUT whose body never completes is cut off by the server's read timeout:
// the server answers and closes the connection instead of holding it.
func TestSlowBodyPutIsCutOff(t *testing.T) {
	addr := startServe(t, "-read-timeout", "300ms")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "PUT /v1/overrides/web/rack_request HTTP/1.1\r\nHost: "+addr+
		"\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"service\": \"web\""); err != nil {
		t.Fatal(err)
	}
	// The client sends nothing more. A generous deadline: only a server that
	// never closes reaches it.
	if err := conn.SetReadDeadline(time.Now().Add(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server held a slow-body PUT open (read %q)", got)
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 400")) && len(got) != 0 {
		t.Fatalf("answer to a cut-off PUT: %q", got)
	}
	// The 300ms read timeout also cuts off a GET whose client was descheduled
	// that long between dialing and sending it (a loaded machine): a
	// transport error is retried, an answer is not.
	var r *http.Response
	for try := 1; ; try++ {
		if r, err = http.Get("http://" + addr + "/v1/overrides/web/rack_request"); err == nil {
			break
		}
		if try == 20 {
			t.Fatalf("GET after the cut-off PUT, %d tries: %v", try, err)
		}
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusNotFound {
		t.Fatalf("after the cut-off PUT: %s, want 404 (nothing stored)", r.Status)
	}
}

// With -write-token-file, PUT needs the token even from loopback, and apply
// sends it with -token-file.
func TestWriteToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("0123456789abcdef-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := startServe(t, "-write-token-file", tokenFile)
	base := "http://" + addr
	file := filepath.Join(dir, "overrides.yaml")
	if err := os.WriteFile(file, []byte(overrides), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"apply", "-server", base, file}, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("apply without the token: %v, want 403", err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"apply", "-server", base, "-token-file", tokenFile, file}, &out, nil); err != nil ||
		!strings.Contains(out.String(), "web/rack_request: revision 1-") {
		t.Fatalf("apply with the token: %v %q", err, out.String())
	}
	req, _ := http.NewRequest(http.MethodDelete, base+"/v1/overrides/web/rack_request", nil)
	req.Header.Set("Authorization", "Bearer wrong-token-0123456789")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusForbidden {
		t.Fatalf("DELETE with a wrong token: %s", r.Status)
	}
}

// Every handler of the HTTP listener checks the Host alike (DNS rebinding):
// /metrics as the management API, with -allowed-hosts replacing the loopback
// names; /healthz answers any name, as a probe by IP (kubelet's Host is the
// pod's IP) must pass.
func TestHTTPListenerChecksHost(t *testing.T) {
	for _, tt := range []struct {
		flags      []string
		path, host string
		want       int
	}{
		{nil, "/metrics", "127.0.0.1", http.StatusOK},
		{nil, "/metrics", "localhost", http.StatusOK},
		{nil, "/metrics", "[::1]", http.StatusOK},
		{nil, "/metrics", "evil.example", http.StatusForbidden},
		{nil, "/v1/overrides/web/rack_request", "evil.example", http.StatusForbidden},
		{nil, "/healthz", "10.0.0.5:8082", http.StatusOK},
		{[]string{"-allowed-hosts", "rules.internal"}, "/metrics", "rules.internal", http.StatusOK},
		{[]string{"-allowed-hosts", "rules.internal"}, "/metrics", "127.0.0.1", http.StatusForbidden},
		{[]string{"-allowed-hosts", "rules.internal"}, "/healthz", "10.0.0.5:8082", http.StatusOK},
	} {
		addr := startServe(t, tt.flags...)
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tt.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("GET %s, Host %s, flags %q: %d %.200q, want %d", tt.path, tt.host, tt.flags, resp.StatusCode, body, tt.want)
		}
	}
}

// /healthz answers any Host, so it says only that Redis is unavailable: the
// cause, which names Redis's address, goes to the log.
func TestHealthzTellsNothingOfRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	addr := startServe(t, "-redis", srv.URL())
	srv.Stop()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "evil.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_, port, _ := net.SplitHostPort(srv.Addr)
	if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(body), port) {
		t.Fatalf("/healthz with Redis down: %d %q, want 503 without Redis's address", resp.StatusCode, body)
	}
}

// A malformed -redis URL is refused at start without showing it: it may hold
// a password (url.Parse quotes the whole URL in its errors).
func TestBadRedisURLHidesPassword(t *testing.T) {
	for _, url := range []string{"redis://u:s3cret@127.0.0.1:63x9", "redis://u:s3cret@127.0.0.1:99999", "redis://u:s3cr%zz@127.0.0.1:6379",
		"redis://u:s3cr/et@127.0.0.1:6379", // an unescaped '/' ends the userinfo early
		"redis://u:s3cret@127.0.0.1:6379/s3cret"} {
		// A URL taken by mistake serves until the context ends.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := run(ctx, []string{"serve", "-redis", url, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0"}, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), "-redis") || strings.Contains(err.Error(), "s3cr") {
			t.Errorf("%s: got %v, want an error about -redis without the password", url, err)
		}
	}
}

// apply warns when its token would cross the network in clear text, and only
// then.
func TestApplyTokenOverPlainHTTPWarns(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("0123456789abcdef-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "overrides.yaml")
	if err := os.WriteFile(file, []byte(overrides), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		server string
		warn   bool
	}{
		{"http://192.0.2.1:1", true}, // TEST-NET-1: nothing answers
		{"http://rules.internal.invalid:1", true},
		{"https://192.0.2.1:1", false},
		{"http://127.0.0.1:1", false},
		{"http://localhost:1", false},
		{"http://[::1]:1", false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var out bytes.Buffer
		_ = run(ctx, []string{"apply", "-server", tc.server, "-token-file", tokenFile, file}, &out, nil)
		cancel()
		if got := strings.Contains(out.String(), "warning: -token-file over plain http"); got != tc.warn {
			t.Errorf("%s: warned %v, want %v (%q)", tc.server, got, tc.warn, out.String())
		}
	}
}
