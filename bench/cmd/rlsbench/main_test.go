package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekit/ratekit/bench/internal/numfmt"
)

func TestVerify(t *testing.T) {
	good := func() *rlsv3.RateLimitResponse {
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: limitPerMinute}},
		}}
	}
	if err := verify(good(), 1); err != nil {
		t.Fatalf("a good answer: %v", err)
	}
	tests := []struct {
		name   string
		change func(*rlsv3.RateLimitResponse)
	}{
		{"over limit", func(r *rlsv3.RateLimitResponse) { r.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT }},
		{"failed open: no current_limit", func(r *rlsv3.RateLimitResponse) { r.Statuses[0].CurrentLimit = nil }},
		{"another limit", func(r *rlsv3.RateLimitResponse) { r.Statuses[0].CurrentLimit.RequestsPerUnit = 5 }},
		{"a status missing", func(r *rlsv3.RateLimitResponse) { r.Statuses = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good()
			tt.change(r)
			if err := verify(r, 1); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestSpliceReadme(t *testing.T) {
	path := filepath.Join(t.TempDir(), "README.md")
	if err := os.WriteFile(path, []byte("# peers\n\ntable\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sec := range []string{sectionHeading + "\n\nfirst\n", sectionHeading + "\n\nsecond\n"} {
		if err := spliceReadme(path, sec); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "# peers\n\ntable\n\n" + sectionHeading + "\n\nsecond\n"; string(b) != want {
		t.Fatalf("README:\n%s\nwant:\n%s", b, want)
	}
}

func TestThousandsAndInts(t *testing.T) {
	if got := numfmt.Thousands(1234567.4); got != "1,234,567" {
		t.Fatalf("thousands: %s", got)
	}
	if _, err := ints("1,0"); err == nil || !strings.Contains(err.Error(), `"0"`) {
		t.Fatalf("ints accepted 0: %v", err)
	}
}

func TestMedian(t *testing.T) {
	ms := []measure{{requests: 30, elapsed: time.Second}, {requests: 10, elapsed: time.Second}, {requests: 20, elapsed: time.Second}}
	if got := median(ms).requests; got != 20 {
		t.Fatalf("median of 30, 10, 20: %d", got)
	}
	if got := median(ms[:2]).requests; got != 10 {
		t.Fatalf("median of 30, 10: %d, want the lower", got)
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and parentheses of its own; utime 250 and
	// stime 75 ticks of 10 ms.
	stat := "4242 (rate (limit) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 75 0 0 20 0 9 0 12345 1000000 500 18446744073709551615"
	got, err := parseStatCPU(stat)
	if err != nil || got != 3250*time.Millisecond {
		t.Errorf("parseStatCPU = %v, %v; want 3.25s", got, err)
	}
	for _, bad := range []string{"4242 no name S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 900 0 0 0 x 75"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q) accepted", bad)
		}
	}
	// This process's own time: a real /proc line parses.
	if _, err := processCPU(os.Getpid()); err != nil && runtime.GOOS == "linux" {
		t.Errorf("processCPU(self): %v", err)
	}
}

func TestDescriptorCosts(t *testing.T) {
	at := func(perSecond int64, cpu time.Duration) []measure {
		return []measure{{requests: perSecond, elapsed: time.Second, serverCPU: cpu}}
	}
	rows := []row{
		{descs: 1, callers: 64, peer: at(1000, 100*time.Millisecond), ratekit: at(2000, 100*time.Millisecond)},
		{descs: 5, callers: 64, peer: at(500, 80*time.Millisecond), ratekit: at(1000, 90*time.Millisecond)},
		{descs: 5, callers: 256, peer: at(500, -1), ratekit: at(1000, -1)}, // no 1-descriptor row: left out
	}
	got := descriptorCosts(rows)
	// envoy: 2x the time, CPU 160 us against 100 us; ratekit: 2x the time, 90 us against 50 us.
	want := []string{"| 5 ÷ 1 | 64 | 2.00× / 1.60× | 2.00× / 1.80× |"}
	if !slices.Equal(got, want) {
		t.Fatalf("descriptorCosts = %q, want %q", got, want)
	}
	rows[1].peer[0].serverCPU = -1
	if got := descriptorCosts(rows[:2]); !strings.Contains(got[0], "| 2.00× / — |") {
		t.Fatalf("unknown CPU: %q", got)
	}
}

// -h exits 0; a flag or value mistake is a usage error (exit 2), not a
// failure of the benchmark (exit 1).
func TestExitCodes(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"-h"}, 0},
		{[]string{"-bogus"}, 2},
		{[]string{"-callers", "x"}, 2},
		{[]string{"-rounds", "0"}, 2},
		{[]string{"-warmup", "-1s"}, 2},
	} {
		err := run(context.Background(), tt.args, io.Discard, io.Discard)
		if got := exitCode(err); got != tt.code {
			t.Errorf("%q: %v, exit %d, want %d", tt.args, err, got, tt.code)
		}
	}
}

func TestPinned(t *testing.T) {
	if got := pinned("", "/bin/redis-server"); !slices.Equal(got, []string{"/bin/redis-server"}) {
		t.Errorf("unpinned: %q", got)
	}
	if got := pinned("1-6", "srv"); !slices.Equal(got, []string{"taskset", "-c", "1-6", "srv"}) {
		t.Errorf("pinned: %q", got)
	}
}

// The section says how envoyproxy/ratelimit's Redis client was set, with
// the values the peer was started with: a pool of connections and no write
// buffering, against ratekit-envoy's pipelining client, are part of what
// the table compares.
func TestSectionNamesPeerRedisSettings(t *testing.T) {
	for _, args := range [][]string{nil, {"-peer-pipeline-window", "150us"}} {
		o, err := parseFlags(append([]string{"-ratekit-bin", "x"}, args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for _, kv := range peerEnv(configs{}, "127.0.0.1:6379", o.peerWindow, [3]int{1, 2, 3}) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		if want := map[bool]string{false: "0", true: "150us"}[args != nil]; env["REDIS_PIPELINE_WINDOW"] != want {
			t.Errorf("flags %q: REDIS_PIPELINE_WINDOW=%q, want %q", args, env["REDIS_PIPELINE_WINDOW"], want)
		}
		var b strings.Builder
		section(&b, o, nil, "Redis 7")
		for _, want := range []string{
			"pool of " + env["REDIS_POOL_SIZE"] + " connections (`REDIS_POOL_SIZE`)",
			"(`REDIS_PIPELINE_WINDOW` " + env["REDIS_PIPELINE_WINDOW"] + ";",
		} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("section lacks %q (peer env %v):\n%s", want, env, b.String())
			}
		}
	}
	if _, err := parseFlags([]string{"-ratekit-bin", "x", "-peer-pipeline-window", "150"}, io.Discard); !errors.Is(err, errUsage) {
		t.Errorf("-peer-pipeline-window 150 (no unit): %v, want a usage error", err)
	}
}
