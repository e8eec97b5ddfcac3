package testlog_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ratekit/ratekit/internal/testlog"
)

// Concurrent writers and readers lose no line (and, under -race, race on
// nothing); Reset empties the buffer.
func TestBufferConcurrent(t *testing.T) {
	var b testlog.Buffer
	const writers, lines = 8, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range lines {
				fmt.Fprintf(&b, "w%d-%d\n", w, i)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != writers*lines {
		t.Fatalf("%d lines, want %d", n, writers*lines)
	}
	if !strings.Contains(b.String(), "w7-199\n") {
		t.Fatal("a writer's last line is missing")
	}
	b.Reset()
	if s := b.String(); s != "" {
		t.Fatalf("after Reset: %q", s)
	}
}
