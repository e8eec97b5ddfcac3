package doccheck

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// imports maps the package names a README block uses to their import paths.
var imports = map[string]string{
	"context":        "context",
	"http":           "net/http",
	"log":            "log",
	"time":           "time",
	"ratelimit":      "github.com/ratekit/ratekit/core",
	"redisstore":     "github.com/ratekit/ratekit/core/redisstore",
	"ratelimittest":  "github.com/ratekit/ratekit/ratelimittest",
	"observe":        "github.com/ratekit/ratekit/observability/observe",
	"rollout":        "github.com/ratekit/ratekit/controlplane/rollout",
	"config":         "github.com/ratekit/ratekit/controlplane/config",
	"ratelimithttp":  "github.com/ratekit/ratekit/middleware/nethttp",
	"ratelimitgrpc":  "github.com/ratekit/ratekit/middleware/grpc",
	"ratelimitecho":  "github.com/ratekit/ratekit/middleware/echo",
	"ratelimitgin":   "github.com/ratekit/ratekit/middleware/gin",
	"ratelimitasynq": "github.com/ratekit/ratekit/middleware/asynq",
	"ratekitenvoy":   "github.com/ratekit/ratekit/envoy",
	"grpc":           "google.golang.org/grpc",
	"echo":           "github.com/labstack/echo/v4",
	"gin":            "github.com/gin-gonic/gin",
	"asynq":          "github.com/hibiken/asynq",
	"prometheus":     "github.com/prometheus/client_golang/prometheus",
}

// block says what a README's Go block takes from the text around it: the
// variables it uses without declaring them, as a function's parameters.
type block struct {
	params string
	// perLine type-checks each line alone: a list of one-line uses whose
	// names mean different things (mux is net/http's and asynq's);
	// lineParams replaces params for a line that names its key.
	perLine    bool
	lineParams map[string]string
}

// blocks names every Go block of the READMEs by its first line, less its
// comment: a block
// added to a README fails the test until it is listed here.
var blocks = map[string]map[string]block{
	"README.md": {
		"store := ratelimit.NewMemoryStore()":          {params: "ctx context.Context"},
		"clock := ratelimittest.NewClock(time.Time{})": {params: "rules []ratelimit.Rule"},
		"http.Handle(\"/\", ratelimithttp.Middleware(limiter, ratelimithttp.WithMux(mux))(mux))": {
			params:     "limiter *ratelimit.Limiter, mux *http.ServeMux, e *echo.Echo, r *gin.Engine",
			perLine:    true,
			lineParams: map[string]string{"ratelimitasynq": "limiter *ratelimit.Limiter, mux *asynq.ServeMux"},
		},
		"rm := observe.NewRolloutMetrics(observe.MetricsOptions{})": {
			params: "ctx context.Context, limiter *ratelimit.Limiter, id ratelimit.Identifier, legacyBlocked bool",
		},
	},
	"envoy/README.md": {
		"svc, err := ratekitenvoy.NewService(limiters, ratekitenvoy.Options{Available: avail})": {
			params: "limiters []*ratelimit.Limiter, avail *config.AvailableLimiters, registry *prometheus.Registry",
		},
	},
}

// lineComment is a comment that ends a line of code.
var lineComment = regexp.MustCompile(`\s+// .*$`)

var goBlock = regexp.MustCompile("(?ms)^([ \t]*)```go\n(.*?)^[ \t]*```")

// goBlocks returns the Go blocks of a Markdown file, unindented.
func goBlocks(md string) []string {
	var out []string
	for _, m := range goBlock.FindAllStringSubmatch(md, -1) {
		lines := strings.Split(strings.TrimSuffix(m[2], "\n"), "\n")
		for i, l := range lines {
			lines[i] = strings.TrimPrefix(l, m[1])
		}
		out = append(out, strings.Join(lines, "\n"))
	}
	return out
}

// source wraps a block's statements in a function of params, importing the
// packages it names.
func source(code, params string) string {
	var b strings.Builder
	b.WriteString("package readme\n\nimport (\n")
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range imports {
			if !yield(k) {
				return
			}
		}
	}) {
		if regexp.MustCompile(`\b` + name + `\.`).MatchString(code + params) {
			fmt.Fprintf(&b, "\t%s %q\n", name, imports[name])
		}
	}
	fmt.Fprintf(&b, ")\n\nfunc _(%s) {\n%s\n}\n", params, code)
	return b.String()
}

// exportData builds the packages that the imports name and returns where
// the go command left each one's export data, dependencies included.
func exportData(t *testing.T) map[string]string {
	t.Helper()
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}
	for _, p := range imports {
		args = append(args, p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	wd, err := filepath.Abs(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "GOWORK="+wd) // every module's packages, whatever GOWORK says
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.Bytes())
	}
	files := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(l, "\t"); ok && file != "" {
			files[path] = file
		}
	}
	return files
}

// A README's Go blocks compile: each, with the names the text around it
// gives it as parameters, type-checks against the packages of this
// checkout. A value a block declares for the reader's later code may stay
// unused.
func TestReadmeGoBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every adapter's dependencies")
	}
	files := exportData(t)
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := files[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	for md, specs := range blocks {
		data, err := os.ReadFile(filepath.Join(root, md))
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]bool{}
		for _, code := range goBlocks(string(data)) {
			first, _, _ := strings.Cut(code, "\n")
			first = lineComment.ReplaceAllString(first, "")
			spec, ok := specs[first]
			if !ok {
				t.Errorf("%s: Go block starting %q is not in blocks: list the names it takes from the text", md, first)
				continue
			}
			found[first] = true
			units := []string{code}
			if spec.perLine {
				units = strings.Split(code, "\n")
			}
			for _, u := range units {
				params := spec.params
				for key, p := range spec.lineParams {
					if strings.Contains(u, key) {
						params = p
					}
				}
				if err := typeCheck(imp, source(u, params)); err != nil {
					t.Errorf("%s: Go block starting %q: %v", md, first, err)
				}
			}
		}
		for first := range specs {
			if !found[first] {
				t.Errorf("%s: no Go block starts %q any more: drop it from blocks", md, first)
			}
		}
	}
}

// typeCheck reports src's type errors but one a README excerpt may have: a
// variable or import it declares and leaves unused.
func typeCheck(imp types.Importer, src string) error {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "readme.go", src, parser.ParseComments)
	if err != nil {
		return fmt.Errorf("parse: %w\n%s", err, src)
	}
	var errs []error
	conf := types.Config{Importer: imp, Error: func(err error) {
		var te types.Error
		if errors.As(err, &te) && (strings.Contains(te.Msg, "declared and not used") || strings.Contains(te.Msg, "imported and not used")) {
			return
		}
		errs = append(errs, err)
	}}
	_, _ = conf.Check("readme", fset, []*ast.File{f}, nil)
	if len(errs) > 0 {
		return fmt.Errorf("%w\n%s", errors.Join(errs...), src)
	}
	return nil
}

// The harness itself: a block that misuses an API fails, one that is right
// passes.
func TestTypeCheck(t *testing.T) {
	files := map[string]string{}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		if files[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(files[path])
	})
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", "time").Output()
	if err != nil {
		t.Fatalf("go list -export time: %v", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(l, "\t")
		files[path] = file
	}
	tests := []struct {
		code    string
		wantErr bool
	}{
		{"d := time.Minute", false},                    // unused: a README's reader uses it later
		{"var n int = time.Minute", true},              // wrong type
		{"time.Sleep(time.Second, time.Second)", true}, // wrong arity
		{"d := time.Minutes", true},                    // no such name
	}
	for _, tt := range tests {
		err := typeCheck(imp, source(tt.code, ""))
		if (err != nil) != tt.wantErr {
			t.Errorf("typeCheck(%q) = %v, want error %v", tt.code, err, tt.wantErr)
		}
	}
}
