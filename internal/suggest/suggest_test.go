package suggest_test

import (
	"flag"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/internal/suggest"
)

func TestDistance(t *testing.T) {
	long := strings.Repeat("a", suggest.MaxLen+1)
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"user", "user", 0},
		{"usernme", "username", 1},   // deletion
		{"userrname", "username", 1}, // insertion
		{"usermame", "username", 1},  // substitution
		{"kitten", "sitting", 3},     // the textbook pair
		{"period_s", "perido_s", 2},  // a swap is two edits
		{strings.Repeat("a", suggest.MaxLen), strings.Repeat("a", suggest.MaxLen), 0},
		{long, "a", math.MaxInt}, // bounded
		{"a", long, math.MaxInt},
	}
	for _, tt := range tests {
		if got := suggest.Distance(tt.a, tt.b); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestClosest(t *testing.T) {
	names := []string{"limit", "period_s", "action", "name"}
	for _, tt := range []struct{ word, want string }{
		{"limt", "limit"},
		{"perod_s", "period_s"},
		{"nme", "name"},
		{"x", ""}, // one letter is as near to many names
		{"", ""},
		{"characteristics", ""},
	} {
		if got := suggest.Closest(tt.word, names); got != tt.want {
			t.Errorf("Closest(%q) = %q, want %q", tt.word, got, tt.want)
		}
	}
}

func TestFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("redis-url", "", "")
	fs.Bool("seed", false, "")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-redis-ulr", "r"}, "redis-url"},
		{[]string{"--sed"}, "seed"},
		{[]string{"-nothing-like-it"}, ""},
		{[]string{"-seed=maybe"}, ""}, // another error
	} {
		err := fs.Parse(tt.args)
		if err == nil {
			t.Fatalf("%q parsed", tt.args)
		}
		if got := suggest.Flag(fs, err); got != tt.want {
			t.Errorf("Flag(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

// TestHint: the "did you mean" tail names the closest property, or is
// empty.
func TestHint(t *testing.T) {
	props := []string{"ip", "path", "user", "username"}
	for _, tt := range []struct{ word, want string }{
		{"usernme", `; did you mean "username"?`},
		{"pth", `; did you mean "path"?`},
		{"usr", `; did you mean "user"?`},
		{"ipp", `; did you mean "ip"?`},
		{"request_type", ""},
		{"", ""},
	} {
		if got := suggest.Hint(tt.word, props); got != tt.want {
			t.Errorf("suggest.Hint(%q) = %q, want %q", tt.word, got, tt.want)
		}
	}
}
