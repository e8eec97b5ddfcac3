package main

import (
	"context"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/internal/redistest"
)

func TestPremiumNamespaceGetsTheRemoteLimit(t *testing.T) {
	url := redistest.URL(t)
	for range 2 { // a second run against the same Redis tells the same story
		var b strings.Builder
		if err := run(context.Background(), &b, url, exampleutil.TestCheckTimeout); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"namespace 345  plan premium  limit 6 (remote tier): 6 of 8 allowed",
			"namespace 7    plan free     limit 3 (local tier): 3 of 8 allowed",
			"rules service calls: 2 for 16 checks",
		} {
			if !strings.Contains(b.String(), want) {
				t.Fatalf("output lacks %q:\n%s", want, b.String())
			}
		}
	}
}

func TestNeedsRedis(t *testing.T) {
	if err := run(context.Background(), &strings.Builder{}, "", 0); err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
		t.Fatalf("error %v, want it to ask for REDIS_URL", err)
	}
}

// Neither the output nor the error shows the password of REDIS_URL, whether
// the URL is malformed or the Redis unreachable, as in every example.
func TestHidesRedisPassword(t *testing.T) {
	for _, url := range []string{
		"redis://:s3cr3t-pw@127.0.0.1:port/0",                  // malformed
		"redis://:s3cr3t-pw@" + redistest.UnusedAddr(t) + "/0", // nothing listens there
	} {
		var b strings.Builder
		err := run(context.Background(), &b, url, 0)
		if err == nil {
			t.Fatalf("run(%s) succeeded, want an error", url)
		}
		if strings.Contains(err.Error()+b.String(), "s3cr3t") {
			t.Errorf("run(%s) shows the password:\n%v\n%s", url, err, b.String())
		}
	}
}
