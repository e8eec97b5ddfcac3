package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/internal/redistest"
)

// checkOutput checks the scenario's story in out. A reported reset_in is
// time.Until(ResetAt) rounded to the second: the window or ban began earlier
// in the run, so the real time the run took (elapsed, measured around it by
// the caller) may have moved it down from its length, never up.
func checkOutput(t *testing.T, out string, elapsed time.Duration) {
	t.Helper()
	for _, want := range []string{
		"failed sign-in 3       allow rule=failed_sign_ins_by_ip count=3 remaining=0",
		"failed sign-in 4       block rule=failed_sign_ins_by_ip count=4 remaining=0 reset_in=15m0s banned",
		"failed sign-in 5       block rule=failed_sign_ins_by_ip count=4 remaining=0",
		"peek (no counting)     block",
		"successful sign-in     cleared 2 keys",
		"next attempt           allow rule=failed_sign_ins_by_ip count=1 remaining=2",
		"alice call 5           allow rule=per_user count=5 remaining=0",
		"alice call 6           block rule=per_user count=6 remaining=0 reset_in=1m0s",
		"ops-bot call (skip)    allow rule=trusted_bypass (skipped: not counted)",
	} {
		head, rest, ok := strings.Cut(want, "reset_in=")
		if !ok {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			continue
		}
		reset, tail, _ := strings.Cut(rest, " ")
		full, err := time.ParseDuration(reset)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)` + regexp.QuoteMeta(head+"reset_in=") + `(\S+)` + regexp.QuoteMeta(strings.TrimSuffix(" "+tail, " ")) + `$`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("output lacks %q:\n%s", want, out)
			continue
		}
		// Rounded to the second: up to half a second below what elapsed left.
		if got, err := time.ParseDuration(m[1]); err != nil || got > full || got < full-elapsed-time.Second/2 {
			t.Errorf("%sreset_in=%s, want %v, less at most the run's %v:\n%s", head, m[1], full, elapsed, out)
		}
	}
}

func TestQuickstartMemory(t *testing.T) {
	var b strings.Builder
	start := time.Now()
	if err := run(context.Background(), &b, "", 0); err != nil {
		t.Fatal(err)
	}
	checkOutput(t, b.String(), time.Since(start))
}

func TestQuickstartRedis(t *testing.T) {
	url := redistest.URL(t)
	for i := 0; i < 2; i++ { // a second run against the same Redis gives the same story
		var b strings.Builder
		start := time.Now()
		if err := run(context.Background(), &b, url, exampleutil.TestCheckTimeout); err != nil {
			t.Fatal(err)
		}
		checkOutput(t, b.String(), time.Since(start))
	}
}

// With Redis down the quickstart runs all the same, as a service would: it
// says that Redis is unreachable and that checks fail open, and shows every
// check allowed with its error.
func TestQuickstartRedisDown(t *testing.T) {
	var b strings.Builder
	if err := run(context.Background(), &b, "redis://127.0.0.1:1/0", 0); err != nil { // nothing listens on port 1
		t.Fatalf("run with Redis down: %v, want the scenario failing open", err)
	}
	out := b.String()
	for _, want := range []string{
		"Redis is unreachable",
		"every check fails open",
		"failed sign-in 5       allow (store unavailable, failing open:",
		"alice call 6           allow (store unavailable, failing open:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// Neither the output nor the error shows the password of REDIS_URL, whether
// the URL is malformed (an error) or the Redis unreachable (the scenario
// fails open).
func TestQuickstartHidesRedisPassword(t *testing.T) {
	for _, tt := range []struct {
		url     string
		wantErr bool
	}{
		{"redis://:s3cr3t-pw@127.0.0.1:1/0", false},   // nothing listens on port 1
		{"redis://:s3cr3t-pw@127.0.0.1:port/0", true}, // malformed
	} {
		var b strings.Builder
		err := run(context.Background(), &b, tt.url, 0)
		if (err != nil) != tt.wantErr {
			t.Fatalf("run(%s): %v, want an error: %v", tt.url, err, tt.wantErr)
		}
		if strings.Contains(fmt.Sprint(err)+b.String(), "s3cr3t") {
			t.Errorf("run(%s) shows the password:\n%v\n%s", tt.url, err, b.String())
		}
	}
}
