// Package cliflagstest tests a bench command's flag parsing against what
// cliflags.Parse promises. It is for tests only: the commands' binaries do
// not link package testing.
package cliflagstest

import (
	"io"
	"strings"
	"testing"
)

// CheckCommand tests that a command's parse function (its flags, then
// Parse) behaves as Parse promises, named as the command: -h prints the
// help on stdout, exit 0; an unknown flag or an argument is a usage error
// naming the command, exit 2, with the help on stderr; no arguments run.
// Each command's test calls it, so that Parse's own test is not repeated.
func CheckCommand(t testing.TB, name string, parse func(args []string, stdout, stderr io.Writer) (code int, ok bool)) {
	t.Helper()
	for _, tt := range []struct {
		args           []string
		code           int
		ok             bool
		stdout, stderr string // what each holds; "" for nothing
	}{
		{nil, 0, true, "", ""},
		{[]string{"-h"}, 0, false, "usage: ", ""},
		{[]string{"-bogus"}, 2, false, "", name + ": flag provided but not defined: -bogus"},
		{[]string{"extra"}, 2, false, "", name + `: unexpected arguments ["extra"]`},
	} {
		var stdout, stderr strings.Builder
		code, ok := parse(tt.args, &stdout, &stderr)
		if code != tt.code || ok != tt.ok {
			t.Errorf("%s %q: exit %d, run %v, want exit %d, run %v", name, tt.args, code, ok, tt.code, tt.ok)
		}
		if (tt.stdout == "") != (stdout.Len() == 0) || !strings.Contains(stdout.String(), tt.stdout) ||
			(tt.stderr == "") != (stderr.Len() == 0) || !strings.Contains(stderr.String(), tt.stderr) {
			t.Errorf("%s %q: stdout %q, stderr %q, want them to hold %q and %q", name, tt.args, stdout.String(), stderr.String(), tt.stdout, tt.stderr)
		}
		if help := stdout.String() + stderr.String(); !tt.ok && (!strings.Contains(help, "usage: ") || !strings.Contains(help, name)) {
			t.Errorf("%s %q: no help naming the command in %q", name, tt.args, help)
		}
	}
}
