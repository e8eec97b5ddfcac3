package doccheck

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/doc/comment"
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

// imports maps the package names a Go block uses to their import paths.
var imports = map[string]string{
	"context":        "context",
	"http":           "net/http",
	"testing":        "testing",
	"adaptertest":    "github.com/ratekit/ratekit/internal/adaptertest",
	"storetest":      "github.com/ratekit/ratekit/core/storetest",
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
	"promhttp":       "github.com/prometheus/client_golang/prometheus/promhttp",
	"fmt":            "fmt",
	"net":            "net",
	"netip":          "net/netip",
	"identifiers":    "github.com/ratekit/ratekit/identifiers",
	"slog":           "log/slog",
	"redis":          "github.com/redis/go-redis/v9",
	"insecure":       "google.golang.org/grpc/credentials/insecure",
	"rulestore":      "github.com/ratekit/ratekit/controlplane/rulestore",
	"tiers":          "github.com/ratekit/ratekit/core/tiers",
	"configv1":       "github.com/ratekit/ratekit/proto/ratelimit/config/v1",
	"remoterules":    "github.com/ratekit/ratekit/controlplane/remoterules",
	"rulesv1":        "github.com/ratekit/ratekit/controlplane/remoterules/rulesv1",
	"adapter":        "github.com/ratekit/ratekit/middleware/adapter",
	"admin":          "github.com/ratekit/ratekit/pages/admin",
	"debug":          "github.com/ratekit/ratekit/pages/debug",
}

// block says what a Go block of a README or a package comment takes from
// the text around it: the variables it uses without declaring them, as a
// function's parameters.
type block struct {
	params string
	// decls are declarations a block of top-level functions needs (a
	// helper it names).
	decls string
	// perLine type-checks each line alone: a list of one-line uses whose
	// names mean different things (mux is net/http's and asynq's);
	// lineParams replaces params for a line that names its key.
	perLine    bool
	lineParams map[string]string
}

// blocks names every Go block of the READMEs, and every block of a package
// comment that parses as Go statements, by its file and its first line,
// less its comment: a block added fails the test until it is listed here.
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
	"core/doc.go": {
		"limiter, err := ratelimit.New(ratelimit.Config{": {params: "ctx context.Context"},
	},
	"core/redisstore/doc.go": {
		"store, err := redisstore.Dial(ctx, \"redis://localhost:6379\")":                   {params: "ctx context.Context, rules []ratelimit.Rule"},
		"redisstore.Dial(ctx, \"redis://:password@host:6379/0\")":                          {params: "ctx context.Context"},
		"opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {": {params: "opt *redis.Options"},
	},
	"ratelimittest/doc.go": {
		"clock := ratelimittest.NewClock(time.Time{})": {params: "t *testing.T, rules []ratelimit.Rule"},
	},
	"controlplane/rulestore/doc.go": {
		"store, err := rulestore.New(client, rulestore.Options{Available: available})": {
			params: "ctx context.Context, client *redis.Client, available *config.AvailableLimiters, limiter *ratelimit.Limiter, fileRules, defaults []ratelimit.Rule",
		},
	},
	"controlplane/remoterules/doc.go": {
		"conn, err := grpc.NewClient(\"rules:8091\", grpc.WithTransportCredentials(insecure.NewCredentials()))": {
			params: "available *config.AvailableLimiters, store ratelimit.Store, rules []ratelimit.Rule",
		},
	},
	"proto/ratelimit/config/v1/doc.go": {
		"available, err := config.LoadAvailableLimiters(\"available_limiters.yaml\")": {},
	},
	"identifiers/doc.go": {
		"nat64 := netip.MustParsePrefix(\"2001:db8:64::/96\")": {params: "limiter *ratelimit.Limiter, mux *http.ServeMux"},
	},
	"middleware/adapter/doc.go": {
		"adapter.AddCost(ctx, \"db_duration_s\", time.Since(start).Seconds())": {params: "ctx context.Context, start time.Time"},
	},
	"middleware/asynq/doc.go": {
		"asynq.Config{": {},
	},
	"middleware/echo/doc.go": {
		"e := echo.New()": {params: "limiter *ratelimit.Limiter"},
	},
	"middleware/gin/doc.go": {
		"r := gin.New()": {params: "limiter *ratelimit.Limiter, handler gin.HandlerFunc"},
	},
	"middleware/grpc/doc.go": {
		"grpc.NewServer(": {params: "limiter *ratelimit.Limiter, recovery, logging, auth grpc.UnaryServerInterceptor"},
	},
	"middleware/nethttp/doc.go": {
		"limiter, err := ratelimit.New(ratelimit.Config{Name: \"http_request\", Store: store, Rules: rules})": {
			params: "store ratelimit.Store, rules []ratelimit.Rule, mux *http.ServeMux",
		},
	},
	"observability/observe/doc.go": {
		"metrics := observe.NewMetrics(observe.MetricsOptions{})": {
			params: "ctx context.Context, store ratelimit.Store, rules []ratelimit.Rule, logger *slog.Logger",
		},
	},
	"CONTRIBUTING.md": {
		"func TestAdapter(t *testing.T) {": {
			decls: "var newHandler func(t *testing.T, s adaptertest.Setup) http.Handler",
		},
		"func TestConformance(t *testing.T) {": {},
	},
	"pages/admin/doc.go": {
		"page, err := admin.New(admin.Options{": {
			params: "store *rulestore.Store, available *config.AvailableLimiters, client *redis.Client, internalMux *http.ServeMux, " +
				"currentUser func(*http.Request) struct{ Name string; IsAdmin bool }",
		},
	},
	"pages/debug/doc.go": {
		"blocks := observe.NewBlockSummary(observe.BlockSummaryOptions{})": {
			params: "limiter *ratelimit.Limiter, ruleStore *rulestore.Store, internalMux *http.ServeMux",
		},
		"internalMux.Handle(\"GET /metrics\", debug.CheckHost(promhttp.Handler(), nil))": {params: "internalMux *http.ServeMux"},
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

// source wraps a block's statements in a function of params that returns an
// error (a block may return one), importing the packages it names.
func source(code, params string) string {
	return sourceWith(code, params, "")
}

// placeholder is a "..." that stands for a value the text leaves out
// (`Store: ...,`), not a variadic call's spread (`rules...`).
var placeholder = regexp.MustCompile(`(^|[\s({\[,:])\.\.\.($|[\s,})\]])`)

// sourceWith is source with decls beside the function; a block of
// top-level functions (a test in CONTRIBUTING.md) stays top-level. Each
// placeholder becomes nil.
func sourceWith(code, params, decls string) string {
	code = placeholder.ReplaceAllString(code, "${1}nil${2}")
	var b strings.Builder
	b.WriteString("package readme\n\nimport (\n")
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range imports {
			if !yield(k) {
				return
			}
		}
	}) {
		if regexp.MustCompile(`\b` + name + `\.`).MatchString(code + params + decls) {
			fmt.Fprintf(&b, "\t%s %q\n", name, imports[name])
		}
	}
	b.WriteString(")\n\n" + decls + "\n")
	if strings.HasPrefix(code, "func ") {
		b.WriteString(code + "\n")
	} else {
		fmt.Fprintf(&b, "func _(%s) error {\n%s\n}\n", params, code)
	}
	return b.String()
}

// exportData builds the packages that the imports name and returns where
// the go command left each one's export data, dependencies included.
func exportData(t *testing.T) map[string]string {
	t.Helper()
	return exportDataOf(t, imports)
}

// exportDataOf is exportData for the packages that pkgs maps to.
func exportDataOf(t *testing.T, pkgs map[string]string) map[string]string {
	t.Helper()
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}
	for _, p := range pkgs {
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

// codeBlocks returns the Go blocks of every Markdown file, and the blocks of
// every package comment of a library that parse as Go statements (the others are YAML,
// shell, keys), by file relative to the repository root.
func codeBlocks(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, f := range files(t, ".md") {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if b := goBlocks(string(data)); len(b) > 0 {
			out[rel(f)] = b
		}
	}
	for _, f := range files(t, ".go") {
		if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, ".pb.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		if file.Doc == nil || file.Name.Name == "main" {
			continue // a command's comment is its usage, not an API's
		}
		var p comment.Parser
		for _, c := range p.Parse(file.Doc.Text()).Content {
			code, ok := c.(*comment.Code)
			if !ok {
				continue
			}
			text := strings.TrimSuffix(code.Text, "\n")
			if _, err := parser.ParseFile(token.NewFileSet(), "", source(text, ""), 0); err == nil {
				out[rel(f)] = append(out[rel(f)], text)
			}
		}
	}
	return out
}

// The Go blocks of the READMEs and of the package comments compile: each,
// with the names the text around it gives it as parameters, type-checks
// against the packages of this checkout. A value a block declares for the
// reader's later code may stay unused.
func TestDocGoBlocksCompile(t *testing.T) {
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
	all := codeBlocks(t)
	for file := range blocks {
		if _, ok := all[file]; !ok {
			all[file] = nil // report each listed block as gone
		}
	}
	for file, codes := range all {
		specs := blocks[file]
		found := map[string]bool{}
		for _, code := range codes {
			first, _, _ := strings.Cut(code, "\n")
			first = lineComment.ReplaceAllString(first, "")
			spec, ok := specs[first]
			if !ok {
				t.Errorf("%s: Go block starting %q is not in blocks: list the names it takes from the text", file, first)
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
				if err := typeCheck(imp, sourceWith(u, params, spec.decls), placeholder.MatchString(u)); err != nil {
					t.Errorf("%s: Go block starting %q: %v", file, first, err)
				}
			}
		}
		for first := range specs {
			if !found[first] {
				t.Errorf("%s: no Go block starts %q any more: drop it from blocks", file, first)
			}
		}
	}
}

// excerpt matches the type errors an excerpt may have: a variable or an
// import it declares for later code, a value it shows without using (a
// config literal), a return it leaves to the code after it.
var excerpt = regexp.MustCompile(`declared and not used|imported (as \w+ )?and not used|is not used|missing return`)

// typeCheck reports src's type errors but those of an excerpt, and when
// placeholders were filled with nil, those of a nil where a value of another
// type belongs.
func typeCheck(imp types.Importer, src string, filled bool) error {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "readme.go", src, parser.ParseComments)
	if err != nil {
		return fmt.Errorf("parse: %w\n%s", err, src)
	}
	var errs []error
	conf := types.Config{Importer: imp, Error: func(err error) {
		var te types.Error
		if errors.As(err, &te) && (excerpt.MatchString(te.Msg) || filled && strings.Contains(te.Msg, "cannot use nil as")) {
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
		{"d := time.Minute", false},                                                      // unused: a README's reader uses it later
		{"var n int = time.Minute", true},                                                // wrong type
		{"time.Sleep(time.Second, time.Second)", true},                                   // wrong arity
		{"d := time.Minutes", true},                                                      // no such name
		{"t := time.Time{}\nreturn nil", false},                                          // a block may return
		{"var d time.Duration = ...", false},                                             // a placeholder
		{"f := func(ds ...time.Duration) {}\nf([]time.Duration{time.Second}...)", false}, // a spread is no placeholder
		{"d := time.Minute + ...\ntime.Sleep(d, d)", true},                               // a placeholder excuses only itself
	}
	for _, tt := range tests {
		err := typeCheck(imp, source(tt.code, ""), placeholder.MatchString(tt.code))
		if (err != nil) != tt.wantErr {
			t.Errorf("typeCheck(%q) = %v, want error %v", tt.code, err, tt.wantErr)
		}
	}
}
