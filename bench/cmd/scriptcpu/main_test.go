package main

import (
	"io"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/bench/internal/cliflags/cliflagstest"
)

// A malformed -redis is refused without its password: url.Parse's error,
// which go-redis returns, quotes the URL whole.
func TestParseRedisURLHidesPassword(t *testing.T) {
	for _, url := range []string{"redis://u:s3cret@127.0.0.1:63x9", "redis://u:s3cr%zz@127.0.0.1:6379"} {
		if _, err := parseRedisURL(url); err == nil || strings.Contains(err.Error(), "s3cr") {
			t.Errorf("%s: %v, want an error without the password", url, err)
		}
	}
	if opt, err := parseRedisURL("redis://127.0.0.1:6379/2"); err != nil || opt.DB != 2 {
		t.Errorf("a good URL: %+v, %v", opt, err)
	}
}

// The command parses its flags with cliflags.Parse, under its own name.
func TestParseArgs(t *testing.T) {
	cliflagstest.CheckCommand(t, "scriptcpu", func(args []string, stdout, stderr io.Writer) (int, bool) {
		_, code, ok := parseArgs(args, stdout, stderr)
		return code, ok
	})
}

// -store names one of the two Stores; anything else is a usage error.
func TestParseArgsStore(t *testing.T) {
	for _, tt := range []struct {
		store string
		ok    bool
	}{{"new", true}, {"dial", true}, {"Dial", false}, {"", false}} {
		var stderr strings.Builder
		o, code, ok := parseArgs([]string{"-store", tt.store}, io.Discard, &stderr)
		if ok != tt.ok || !ok && (code != 2 || !strings.Contains(stderr.String(), "-store")) || ok && o.store != tt.store {
			t.Errorf("-store %q: ok %v, code %d, stderr %q", tt.store, ok, code, stderr.String())
		}
	}
}
