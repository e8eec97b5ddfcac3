package main

import (
	"strings"
	"testing"
	"time"
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
