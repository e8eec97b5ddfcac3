package conformance

import (
	"io/fs"
	"os"
	"testing"
)

// TestEveryFileIsEmbedded: every file of scenarios/ is a scenario that the
// stores run. The embed pattern takes *.yaml only, so a file named .yml (or
// anything else) would silently never run.
func TestEveryFileIsEmbedded(t *testing.T) {
	entries, err := os.ReadDir("scenarios")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatal("scenarios/ is empty")
	}
	for _, e := range entries {
		if _, err := fs.Stat(Scenarios(), e.Name()); err != nil {
			t.Errorf("scenarios/%s is not embedded, so no store runs it: name scenario files *.yaml (%v)", e.Name(), err)
		}
	}
}
