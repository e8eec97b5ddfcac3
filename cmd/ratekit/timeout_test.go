package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// Every --timeout is bounded: a typo such as 1000h would hold a command on a
// hung Redis for weeks. Above the bound it is a usage error (exit 2) naming
// the bound, in every command that takes one; the bound itself is accepted.
func TestTimeoutBounded(t *testing.T) {
	dir := t.TempDir()
	const redis = "redis://127.0.0.1:1"
	for _, args := range [][]string{
		{"admin", "--redis", redis, "--available-limiters", "available_limiters.yaml"},
		{"clear", "--redis", redis, "--limiter", "api_request", "ip=192.0.2.1"},
		{"explain", "--redis", redis, "--limiter", "api_request", "ip=192.0.2.1"},
		{"rollout", "gate", "--metrics", "metrics.txt"},
		{"rules", "list", "--redis", redis},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			code, stdout, stderr := ratekit(t, dir, append(args, "--timeout", "1000h")...)
			if code != exitUsage || stdout != "" || !strings.Contains(stderr, "--timeout 1000h0m0s is over the bound of 10m0s") {
				t.Errorf("--timeout 1000h: exit %d, stdout %q, stderr:\n%s\nwant exit 2 naming the bound", code, stdout, stderr)
			}
		})
	}
}

func TestCheckTimeout(t *testing.T) {
	for _, tt := range []struct {
		d    string
		want string // "" when accepted
	}{
		{"1s", ""},
		{"10m", ""},
		{"10m1s", "--timeout 10m1s is over the bound of 10m0s"},
		{"0s", "--timeout must be positive, got 0s"},
		{"-1s", "--timeout must be positive, got -1s"},
	} {
		d, err := time.ParseDuration(tt.d)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if err := checkTimeout(d); err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("checkTimeout(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// TestTimeoutBoundsTheWholeCommand: clear's and explain's --timeout bounds
// the command, not each of its Redis calls. Through a proxy that holds every
// command 400ms, each call is well within a --timeout of 2s and the calls
// together (the rule store's reads, one EXISTS per key, the delete) are not:
// the command stops at the bound, and clear deletes nothing. Each call had
// its own bound before, so clear went on and cleared the keys.
func TestTimeoutBoundsTheWholeCommand(t *testing.T) {
	client := redistest.Client(t)
	e := newExplainEnv(t, client, slowProxy(t, redistest.URL(t), 400*time.Millisecond), false)
	bob := ratelimit.Identifier{"user": "bob", "ip": "10.0.0.3", "request_type": "web", "path": "/login"}
	e.check(t, 3, bob) // login_by_ip bans: a ban and counters to clear
	keys := e.limiter.Keys(bob)
	id := []string{"ip=10.0.0.3", "path=/login", "user=bob", "request_type=web", "--timeout", "2s"}
	for _, cmd := range []string{"clear", "explain"} {
		t.Run(cmd, func(t *testing.T) {
			args := append([]string{cmd}, e.flags()[1:]...)
			stdout, stderr, code := e.run(t, append(args, id...)...)
			if code != exitInvalid || !strings.Contains(stderr, "context deadline exceeded") {
				t.Fatalf("exit %d, want 1 and the deadline named\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			n, err := client.Exists(context.Background(), keys...).Result()
			if err != nil || n != 3 {
				t.Fatalf("after %s stopped at its bound: %d of the 3 keys left (%v)", cmd, n, err)
			}
		})
	}
}

// slowProxy serves a TCP proxy to the Redis of redisURL that holds every
// write of a client delay before it forwards it, and returns the URL that
// reaches Redis through it.
func slowProxy(t *testing.T, redisURL string, delay time.Duration) string {
	return redisProxy(t, redisURL, func([]byte) { time.Sleep(delay) })
}

// TestHungRedisNamed: a command stopped by a Redis that does not answer
// names that Redis. A timeout said only "context deadline exceeded", while
// a refused connection names the address: during an incident, which Redis
// hangs is the first thing the operator needs.
func TestHungRedisNamed(t *testing.T) {
	dir := t.TempDir()
	addr := redistest.Blackhole(t)
	for _, args := range [][]string{
		{"rules", "list"},
		{"explain", "--limiter", "api_request", "ip=192.0.2.1"},
		{"clear", "--limiter", "api_request", "ip=192.0.2.1"},
	} {
		t.Run(strings.Join(args[:1], " "), func(t *testing.T) {
			code, _, stderr := ratekit(t, dir, append(args, "--redis", "redis://"+addr, "--timeout", "1s")...)
			if code != exitInvalid || !strings.Contains(stderr, "Redis at "+addr+" did not answer") {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 1 naming Redis at %s", code, stderr, addr)
			}
		})
	}
}

// TestHungSentinelsNamed: with every sentinel hung (accepting connections,
// answering nothing), a command fails at its --timeout naming the master
// set and the sentinels, and exits.
func TestHungSentinelsNamed(t *testing.T) {
	dir := t.TempDir()
	sentinels := []string{redistest.Blackhole(t), redistest.Blackhole(t), redistest.Blackhole(t)}
	url := "redis-sentinel://" + strings.Join(sentinels, ",") + "/mymaster"
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, _, stderr := ratekit(t, dir, "rules", "list", "--redis", url, "--timeout", "1s")
		done <- result{code, stderr}
	}()
	select {
	case r := <-done:
		want := "Redis (master set mymaster, sentinels " + strings.Join(sentinels, ",") + ") did not answer"
		if r.code != exitInvalid || !strings.Contains(r.stderr, want) {
			t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and %q", r.code, r.stderr, want)
		}
	case <-time.After(time.Minute):
		t.Fatal("rules list --timeout 1s still runs after a minute with the sentinels hung")
	}
}

// TestDialBoundedByTimeout: the command's --timeout bounds each dial of its
// client, the sentinels' too. go-redis asks the sentinels for the master
// under its dial timeout, not the command's context, and a FailoverClient's
// Close waits for their answers: with the sentinels SIGSTOPped, rules list
// --timeout 1s failed after 1s and exited after 5s (go-redis' read timeout
// bounds a dial whose dial_timeout is longer).
func TestDialBoundedByTimeout(t *testing.T) {
	tests := []struct {
		url     string
		timeout time.Duration
		want    time.Duration
	}{
		{"redis://127.0.0.1:6379", time.Second, time.Second},
		{"redis-sentinel://127.0.0.1:26379,127.0.0.1:26380/m", time.Second, time.Second},
		{"redis-sentinel://127.0.0.1:26379/m?dial_timeout=1m", 2 * time.Second, 2 * time.Second},
		{"redis-sentinel://127.0.0.1:26379/m?dial_timeout=300ms", 2 * time.Second, 300 * time.Millisecond},
		{"redis://127.0.0.1:6379", time.Minute, goRedisDialTimeout},
	}
	for _, tt := range tests {
		c, err := redisClient(tt.url, false, tt.timeout)
		if err != nil {
			t.Fatalf("%s: %v", tt.url, err)
		}
		if got := c.(*redis.Client).Options().DialTimeout; got != tt.want {
			t.Errorf("%s, --timeout %v: dial timeout %v, want %v", tt.url, tt.timeout, got, tt.want)
		}
		_ = c.Close()
	}
}
