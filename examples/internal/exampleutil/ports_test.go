package exampleutil

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every example's default listen address is its own (two examples run side
// by side), and examples/README.md lists every example and address.
func TestDefaultPortsDistinctAndDocumented(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	mains, err := filepath.Glob(filepath.Join("..", "..", "*", "main.go"))
	if err != nil || len(mains) < 8 {
		t.Fatalf("examples: %v %v", mains, err)
	}
	sources := append(mains, filepath.Join("..", "httpexample", "httpexample.go"))
	addr := regexp.MustCompile(`"(localhost:\d+)"`)
	owner := map[string]string{}
	for _, f := range sources {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range addr.FindAllStringSubmatch(string(b), -1) {
			if prev, ok := owner[m[1]]; ok && prev != f {
				t.Errorf("%s is the default of both %s and %s", m[1], prev, f)
			}
			owner[m[1]] = f
			if !strings.Contains(string(readme), "`"+m[1]+"`") {
				t.Errorf("examples/README.md does not list %s (%s)", m[1], f)
			}
		}
	}
	for _, f := range mains {
		dir := filepath.Base(filepath.Dir(f))
		if !strings.Contains(string(readme), "go run ./examples/"+dir) {
			t.Errorf("examples/README.md has no row for %s", dir)
		}
	}
}
