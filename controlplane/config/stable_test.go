package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

const stableRateLimits = `rate_limits:
  open:
    - name: per_ip
      action: limit
      limit: 100
      period_s: 60
      characteristics: [ip]
    - name: per_user
      action: limit
      limit: 10
      period_s: 60
      characteristics: [user]
`

// TestReadStableNeverAppliesAPartialFile: a file written in place in two
// steps is, between them, a valid file with fewer rules (the hazard); a
// stable read that spans the second write reports ErrFileChanging instead of
// that prefix, and a read of the finished file returns all of it.
func TestReadStableNeverAppliesAPartialFile(t *testing.T) {
	available := stableAvailable(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "rate_limits.yaml")
	cut := len(stableRateLimits) - len("    - name: per_user\n      action: limit\n      limit: 10\n      period_s: 60\n      characteristics: [user]\n")
	partial := stableRateLimits[:cut]

	// The hazard: the prefix alone is a valid file with one rule.
	if err := os.WriteFile(path, []byte(partial), 0o644); err != nil {
		t.Fatal(err)
	}
	rl, err := LoadRateLimits(path, available)
	if err != nil {
		t.Fatal(err)
	}
	if rules, _ := rl.Rules("open"); len(rules) != 1 {
		t.Fatalf("the prefix has %d rules, want 1 (the test needs a valid prefix)", len(rules))
	}

	sawChanging := false
	for attempt := 0; attempt < 20 && !sawChanging; attempt++ {
		if err := os.WriteFile(path, []byte(partial), 0o644); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(100 * time.Millisecond) // well inside the settle delay below
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = f.WriteString(stableRateLimits[cut:])
			_ = f.Close()
		}()
		rl, err := LoadRateLimitsStable(context.Background(), path, available, 3*time.Second)
		<-done
		switch {
		case errors.Is(err, ErrFileChanging):
			sawChanging = true
		case err != nil:
			t.Fatal(err)
		default:
			// Both reads came after the second write (a loaded machine): the
			// whole file. Never the prefix.
			if rules, _ := rl.Rules("open"); len(rules) != 2 {
				t.Fatalf("a stable read applied %d rules of a file being written", len(rules))
			}
		}
	}
	if !sawChanging {
		t.Fatal("no read spanned the second write in 20 attempts")
	}
	rl, err = LoadRateLimitsStable(context.Background(), path, available, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if rules, _ := rl.Rules("open"); len(rules) != 2 {
		t.Fatalf("the finished file read as %d rules", len(rules))
	}
}

func TestReadStableMissingAndAppearing(t *testing.T) {
	available := stableAvailable(t)
	path := filepath.Join(t.TempDir(), "rate_limits.yaml")
	rl, err := LoadRateLimitsStable(context.Background(), path, available, 10*time.Millisecond)
	if err != nil || len(rl.Limiters()) != 0 {
		t.Fatalf("missing file: %v, %v", rl, err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = os.WriteFile(path, []byte(stableRateLimits), 0o644)
	}()
	_, err = ReadStable(context.Background(), path, 3*time.Second)
	if err != nil && !errors.Is(err, ErrFileChanging) {
		t.Fatalf("a file that appears between the reads: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ReadStable(ctx, path, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled read: %v", err)
	}
}

func stableAvailable(t *testing.T) *AvailableLimiters {
	t.Helper()
	a, err := ParseAvailableLimiters("available_limiters.yaml", []byte("available_limiters:\n  open:\n    description: d\n    available_properties: [ip, user]\n"))
	if err != nil {
		t.Fatal(err)
	}
	return a
}
