package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/examples/internal/httpexample"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestIncidentPath walks the on-call path against the example as it runs by
// default (the prefixes of `ratekit --service examples`) with the built
// ratekit CLI: a client is blocked, `explain` shows it, `clear` lifts it (the
// next request passes), an incident rule matching every request is
// published, and /healthz still answers 200. With
// RATEKIT_INCIDENT_TRANSCRIPT=FILE the commands and their output are written
// there.
func TestIncidentPath(t *testing.T) {
	url := redistest.URL(t)
	dir := t.TempDir()
	cli := filepath.Join(dir, "ratekit")
	if out, err := exec.Command("go", "build", "-o", cli, "github.com/ratekit/ratekit/cmd/ratekit").CombinedOutput(); err != nil {
		t.Fatalf("build ratekit: %v\n%s", err, out)
	}
	available := filepath.Join(dir, "available_limiters.yaml")
	incident := filepath.Join(dir, "incident.yaml")
	for path, body := range map[string]string{available: httpexample.AvailableLimiters, incident: `rate_limits:
  http_request:
    - name: incident_per_ip
      description: "incident: 2 requests a minute per client, every endpoint"
      action: limit
      match: {}
      characteristics: [ip]
      limit: 2
      period_s: 60
`} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var transcript strings.Builder
	say := func(format string, args ...any) { fmt.Fprintf(&transcript, format+"\n", args...) }
	ratekit := func(wantCode int, args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Env = append(os.Environ(), "RATEKIT_REDIS_URL="+url)
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		say("$ ratekit %s\n%s(exit %d)", strings.Join(args, " "), out, code)
		if code != wantCode {
			t.Fatalf("ratekit %v: exit %d, want %d\n%s", args, code, wantCode, out)
		}
		return string(out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	addrc, internalc, done := make(chan net.Addr, 1), make(chan net.Addr, 1), make(chan error, 1)
	o := httpexample.Options{Addr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0", RedisURL: url, CheckTimeout: exampleutil.TestCheckTimeout,
		TrustedProxies: []string{"127.0.0.1/32"}, // the test plays clients of its own addresses
		Ready:          func(a net.Addr) { addrc <- a }, InternalReady: func(a net.Addr) { internalc <- a }}
	go func() { done <- httpexample.Run(ctx, "net/http", o, newHandler) }()
	var public string
	select {
	case a := <-addrc:
		public = "http://" + a.String()
		<-internalc
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	quiet := false // while polling
	get := func(path, ip string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, public+path, nil)
		req.Header.Set("X-Forwarded-For", ip)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if !quiet {
			say("GET %s (client %s): %d", path, ip, resp.StatusCode)
		}
		return resp.StatusCode
	}
	// A client of this run alone: the example's prefixes are shared.
	n := time.Now().UnixNano()
	client := func(i int64) string { return fmt.Sprintf("10.%d.%d.%d", (n>>16)%250, (n>>8)%250, (n+i)%250) }
	ip := client(0)

	say("# 1. a client is blocked: 5 requests a minute, the sixth gets 429")
	for i := 1; i <= 6; i++ {
		if code := get("/hello", ip); (i <= 5) != (code == http.StatusOK) {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	say("\n# 2. explain shows it (the CLI's --service examples prefixes are the example's)")
	id := []string{"ip=" + ip, "endpoint=GET /hello", "path=/hello", "method=GET"}
	// As examples/README.md shows it: no available_limiters.yaml, the example
	// seeded its rules in the store.
	out := ratekit(0, append([]string{"explain", "--service", "examples", "--limiter", "http_request"}, id...)...)
	if !strings.Contains(out, "block") || !strings.Contains(out, "hello_per_ip") {
		t.Fatalf("explain does not show the block:\n%s", out)
	}
	say("\n# 3a. clear under the wrong prefix (no --service) clears nothing, fails and names the right one")
	out = ratekit(1, append([]string{"clear", "--limiter", "http_request", "--available-limiters", available}, id...)...)
	if !strings.Contains(out, "rerun with --service examples") {
		t.Fatalf("clear without --service:\n%s", out)
	}
	say("\n# 3. clear lifts it, verified by the next request")
	out = ratekit(0, append([]string{"clear", "--service", "examples", "--limiter", "http_request"}, id...)...)
	if !strings.Contains(out, "cleared 1 key") {
		t.Fatalf("clear:\n%s", out)
	}
	if code := get("/hello", ip); code != http.StatusOK {
		t.Fatalf("after clear: %d", code)
	}
	say("\n# 4. an incident rule matching every request is published")
	t.Cleanup(func() {
		cmd := exec.Command(cli, "rules", "delete", "--redis", url, "--service", "examples", "http_request", "incident_per_ip")
		_ = cmd.Run()
	})
	ratekit(0, "rules", "publish", "--service", "examples", "--available-limiters", available, "--file", incident)
	// The example refreshes its rules every second: wait until a fresh
	// client is blocked at its third request.
	quiet = true
	for i, deadline := int64(1), time.Now().Add(20*time.Second); ; i++ {
		c := client(i)
		codes := []int{get("/hello", c), get("/hello", c), get("/hello", c)} // the third is over a limit of 2
		if codes[0] == http.StatusOK && codes[1] == http.StatusOK && codes[2] == http.StatusTooManyRequests {
			ip = c
			say("(polled until the services enforce it: client %s got 200, 200, 429 on GET /hello)", c)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the incident rule was never enforced")
		}
		time.Sleep(100 * time.Millisecond)
	}
	quiet = false
	say("\n# 5. health checks still 200 from the blocked client")
	for i := 1; i <= 5; i++ {
		if code := get("/healthz", ip); code != http.StatusOK {
			t.Fatalf("/healthz #%d under the incident rule: %d", i, code)
		}
	}
	if path := os.Getenv("RATEKIT_INCIDENT_TRANSCRIPT"); path != "" {
		if err := os.WriteFile(path, []byte(transcript.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
