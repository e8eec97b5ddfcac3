package httpexample

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestMainRedisDownLogsNoGoRedisLines runs Main (this test binary, again)
// with REDIS_URL on a port where nothing listens: its log must hold the
// example's own records only, not go-redis's plain-text dial failures
// ("redis: ... pool.go: ... failed to dial"), which came twice a second
// from the rule store's client. The admin page's line comes after the
// start-up seed, whose bounded attempt dials Redis, so go-redis has had its
// chance to log by then.
func TestMainRedisDownLogsNoGoRedisLines(t *testing.T) {
	if os.Getenv("HTTPEXAMPLE_RUN_MAIN") == "1" {
		os.Args = []string{"example", "-addr", "127.0.0.1:0", "-internal-addr", "127.0.0.1:0"}
		Main("net/http", func(*ratelimit.Limiter, identifiers.TrustedProxies) (http.Handler, error) {
			return http.NotFoundHandler(), nil
		})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainRedisDownLogsNoGoRedisLines$")
	cmd.Env = append(os.Environ(), "HTTPEXAMPLE_RUN_MAIN=1", "REDIS_URL=redis://"+redistest.UnusedAddr(t)+"/0")
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), "admin page at") {
			break
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "redis: ") {
			t.Fatalf("go-redis's own line in the example's log: %q\nlog:\n%s", l, strings.Join(lines, "\n"))
		}
	}
	if len(lines) == 0 || !strings.Contains(lines[len(lines)-1], "admin page at") {
		t.Fatalf("the example never logged its admin page:\n%s", strings.Join(lines, "\n"))
	}
}
