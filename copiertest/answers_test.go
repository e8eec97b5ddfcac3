package copiertest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadAnswers checks that copier refuses invalid answers with the
// validator's message and renders nothing.
func TestBadAnswers(t *testing.T) {
	for _, c := range []struct {
		name, key, value, want string
	}{
		{"service name with a dash", "service_name", "Bad-Name", `Validation error for question 'service_name': invalid service name "Bad-Name": use lower-case letters`},
		{"service name starting with a digit", "service_name", "9lives", `invalid service name "9lives"`},
		{"service name too long", "service_name", "s" + strings.Repeat("x", 63), "at most 63 characters"},
		{"module path with a space", "go_module", "example.com/my service", `Validation error for question 'go_module': invalid Go module path "example.com/my service"`},
		{"no framework", "frameworks", "[]", "Validation error for question 'frameworks': choose at least one framework"},
		{"unknown framework", "frameworks", "[django]", "Invalid choice for 'frameworks': 'django' is not in"},
		{"lower-case variable", "redis_url_env", "redis-url", `invalid environment variable name "redis-url"`},
		{"relative ratekit path", "ratekit_path", "checkouts/ratekit", `invalid ratekit path "checkouts/ratekit": give an absolute path or one starting with ./ or ../`},
		{"version without v", "ratekit_version", "1.2.3", `invalid ratekit version "1.2.3"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := filepath.Join(work, "bad", strings.ReplaceAll(c.name, " ", "_"))
			out, err := command(work, gitEnv(), "copier", append([]string{"copy", "--trust", "--defaults"},
				append(dataArgs(map[string]string{c.key: c.value}), templateRepo, dst)...)...)
			if err == nil {
				t.Fatalf("copier accepted %s=%q:\n%s", c.key, c.value, out)
			}
			if !strings.Contains(out, c.want) {
				t.Errorf("copier's message for %s=%q lacks %q:\n%s", c.key, c.value, c.want, out)
			}
			if entries, _ := os.ReadDir(dst); len(entries) > 0 {
				t.Errorf("copier rendered %d entries despite the bad answer", len(entries))
			}
		})
	}
}
