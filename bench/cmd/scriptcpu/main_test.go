package main

import (
	"strings"
	"testing"
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

// -h prints the help on stdout and exits 0; a flag mistake or an argument
// is a usage error (exit 2) with the help on stderr, as the project's
// binaries do (it printed -h on stderr and ignored arguments).
func TestParseArgs(t *testing.T) {
	for _, tt := range []struct {
		args           []string
		code           int
		ok             bool
		stdout, stderr string // what each holds; "" for nothing
	}{
		{nil, 0, true, "", ""},
		{[]string{"-h"}, 0, false, "usage: ", ""},
		{[]string{"-bogus"}, 2, false, "", "scriptcpu: flag provided but not defined: -bogus"},
		{[]string{"extra"}, 2, false, "", "scriptcpu: unexpected arguments [\"extra\"]"},
	} {
		var stdout, stderr strings.Builder
		_, code, ok := parseArgs(tt.args, &stdout, &stderr)
		if code != tt.code || ok != tt.ok {
			t.Errorf("%q: exit %d, run %v, want exit %d, run %v", tt.args, code, ok, tt.code, tt.ok)
		}
		if (tt.stdout == "") != (stdout.Len() == 0) || !strings.Contains(stdout.String(), tt.stdout) ||
			(tt.stderr == "") != (stderr.Len() == 0) || !strings.Contains(stderr.String(), tt.stderr) {
			t.Errorf("%q: stdout %q, stderr %q, want them to hold %q and %q", tt.args, stdout.String(), stderr.String(), tt.stdout, tt.stderr)
		}
	}
}
