package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/internal/redistest"
)

// TestFindElsewhereBounded: the search for an identifier's keys under other
// prefixes never receives a key longer than a counter can be (a prefix of at
// most ratelimit.MaxKeyPrefixLen, then the counter's own part): a key
// written by hand that matches the pattern, 4 MiB long, was received whole
// (and its 4 MiB prefix named in the hint clear and explain print), while
// the counter under another service's prefix is still found.
func TestFindElsewhereBounded(t *testing.T) {
	ctx := context.Background()
	client := redistest.Client(t)
	base := redistest.Prefix(t)
	ip := fmt.Sprintf("10.9.%d.%d", time.Now().UnixNano()%250, time.Now().UnixNano()/250%250)
	suffix := "{api_request:per_ip:ip=" + ip + "}"
	other := base + "other:"
	huge := base + strings.Repeat("x", 4<<20) + ":"
	for _, k := range []string{other + suffix, huge + suffix} {
		if err := client.Set(ctx, k, "1", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Del(context.Background(), k) })
	}
	var read atomic.Int64
	counting := redistest.CountingClient(t, &read)
	found, err := findElsewhere(ctx, counting, base+"here:", "api_request", []string{base + "here:" + suffix}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(found.prefixes) != 1 || found.prefixes[other] != 1 {
		names := make([]string, 0, len(found.prefixes))
		for p := range found.prefixes {
			names = append(names, fmt.Sprintf("%.80q", p))
		}
		t.Errorf("found under %v, want under %q alone", names, other)
	}
	if n := read.Load(); n >= 1<<20 {
		t.Errorf("the search received %d bytes from Redis, want the 4 MiB key left there", n)
	}
}
