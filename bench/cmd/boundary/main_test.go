package main

import (
	"strings"
	"testing"
)

// boundary takes no arguments: -h prints its help on stdout (exit 0), and
// anything else is a usage error (exit 2) rather than ignored.
func TestParseArgs(t *testing.T) {
	for _, tt := range []struct {
		args       []string
		code       int
		ok         bool
		onStdout   bool // the help is on stdout, else on stderr
		wantStderr string
	}{
		{nil, 0, true, false, ""},
		{[]string{"-h"}, 0, false, true, ""},
		{[]string{"extra"}, 2, false, false, `boundary: unexpected arguments ["extra"]`},
		{[]string{"-n", "3"}, 2, false, false, "boundary: flag provided but not defined: -n"},
	} {
		var stdout, stderr strings.Builder
		code, ok := parseArgs(tt.args, &stdout, &stderr)
		if code != tt.code || ok != tt.ok {
			t.Errorf("%q: exit %d, run %v, want exit %d, run %v", tt.args, code, ok, tt.code, tt.ok)
		}
		if tt.ok {
			if stdout.Len()+stderr.Len() != 0 {
				t.Errorf("%q: wrote %q, %q before running", tt.args, stdout.String(), stderr.String())
			}
			continue
		}
		help := stdout.String()
		if !tt.onStdout {
			help = stderr.String()
			if stdout.Len() != 0 || !strings.Contains(help, tt.wantStderr) {
				t.Errorf("%q: stdout %q, stderr %q, want %q and the help on stderr", tt.args, stdout.String(), help, tt.wantStderr)
			}
		}
		if !strings.Contains(help, "usage: boundary") {
			t.Errorf("%q: no help in %q", tt.args, help)
		}
	}
}
