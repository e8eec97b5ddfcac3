package copiertest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's "Depending on ratekit before its first release" blocks work:
// each, run in a fresh module that imports the core and the gRPC adapter,
// with RATEKIT set to this checkout, gives a module that builds.
func TestReadmeDependBeforeRelease(t *testing.T) {
	readme := read(t, filepath.Join(repoRoot, "README.md"))
	blocks := regexp.MustCompile("(?s)<!-- depend: ([^>]+) -->\n```sh\n(.*?)```").FindAllStringSubmatch(readme, -1)
	if len(blocks) != 2 {
		t.Fatalf("README.md has %d depend blocks, want 2 (go mod edit, go.work)", len(blocks))
	}
	for _, b := range blocks {
		t.Run(strings.ReplaceAll(b[1], " ", "_"), func(t *testing.T) {
			script := regexp.MustCompile(`(?m)^RATEKIT=.*$`).ReplaceAllString(b[2], "RATEKIT="+repoRoot)
			if script == b[2] {
				t.Fatalf("block %q does not set RATEKIT:\n%s", b[1], b[2])
			}
			dir := t.TempDir()
			write(t, filepath.Join(dir, "go.mod"), "module example.com/app\n\ngo 1.26.0\n")
			write(t, filepath.Join(dir, "main.go"), `package main

import (
	"fmt"

	ratelimit "github.com/ratekit/ratekit/core"
	ratelimitgrpc "github.com/ratekit/ratekit/middleware/grpc"
)

func main() {
	l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: ratelimit.NewMemoryStore()})
	fmt.Println(l != nil, err, ratelimitgrpc.UnaryServerInterceptor(l) != nil)
}
`)
			env := append(gitEnv(), "GOWORK=", "GOFLAGS=") // the block decides the mode
			run(t, dir, env, "bash", "-euo", "pipefail", "-c", script)
			run(t, dir, env, "go", "build", "-o", os.DevNull, ".")
		})
	}
}
