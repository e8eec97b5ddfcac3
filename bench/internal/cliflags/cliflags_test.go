package cliflags

import (
	"flag"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name           string
		args           []string
		code           int
		ok             bool
		stdout, stderr string // each output holds it; "" means empty
	}{
		{"no arguments", nil, 0, true, "", ""},
		{"a flag", []string{"-n", "3"}, 0, true, "", ""},
		{"help", []string{"-h"}, 0, false, "-n int", ""},
		{"unknown flag", []string{"-bogus"}, 2, false, "", "cmd: flag provided but not defined: -bogus"},
		{"bad value", []string{"-n", "x"}, 2, false, "", `cmd: invalid value "x" for flag -n`},
		{"unexpected argument", []string{"-n", "3", "extra"}, 2, false, "", `cmd: unexpected arguments ["extra"]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("cmd", flag.ExitOnError) // Parse never exits
			fs.Int("n", 1, "a count")
			var stdout, stderr strings.Builder
			code, ok := Parse(fs, tt.args, &stdout, &stderr)
			if code != tt.code || ok != tt.ok {
				t.Errorf("Parse(%q) = %d, %v, want %d, %v", tt.args, code, ok, tt.code, tt.ok)
			}
			for _, out := range []struct{ name, got, want string }{{"stdout", stdout.String(), tt.stdout}, {"stderr", stderr.String(), tt.stderr}} {
				if out.want == "" && out.got != "" || !strings.Contains(out.got, out.want) {
					t.Errorf("Parse(%q) %s %q, want it to hold %q", tt.args, out.name, out.got, out.want)
				}
			}
			if tt.code == 2 && !strings.Contains(stderr.String(), "-n int") {
				t.Errorf("Parse(%q): a usage error without the help: %q", tt.args, stderr.String())
			}
		})
	}
}
