package doccheck

import (
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"regexp"
	"strings"
	"testing"
)

// spanName is a package's exported name in a Markdown code span, with a
// field or method after it: `redisstore.Options`, `rulestore.Store.CheckGC`.
// typeMember is an exported type's field or method named without its
// package: `Config.Timeout`, `GCReport.Found`.
var typeMember = regexp.MustCompile(`(?:^|[^\w.])([A-Z]\w*)\.([A-Z]\w*)`)

var spanName = regexp.MustCompile(`(?:^|[^\w.])([a-z]\w*)\.([A-Z]\w*)(?:\.([A-Z]\w*)|\{(\w+):)?`)

// Every Go name a Markdown file's code span gives exists: a package's
// exported name (`redisstore.GoRedisOptions`), a field or method after it
// (`rulestore.Store.CheckGC`, `redisstore.Options{RequireConnection: true}`),
// and a type's field or method named without its package (`Config.Timeout`,
// in one of the packages the documents name). A renamed API that left the
// text behind fails here.
func TestMarkdownNamesExist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the packages the documents name")
	}
	pkgs := maps.Clone(imports)
	maps.Copy(pkgs, limitPackages)
	pkgs["ratelimitheaders"] = "github.com/ratekit/ratekit/middleware/headers"
	pkgs["exampleutil"] = "github.com/ratekit/ratekit/examples/internal/exampleutil"
	pkgs["guard"] = "github.com/ratekit/ratekit/internal/guard"
	exports := exportDataOf(t, pkgs)
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	checked := 0
	for _, f := range files(t, ".md") {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		proseLines(data, func(n int, line string) {
			for _, span := range codeRun.FindAllString(line, -1) {
				for _, m := range typeMember.FindAllStringSubmatch(strings.Trim(span, "`"), -1) {
					found, typed := false, false
					for _, path := range pkgs {
						p, err := imp.Import(path)
						if err != nil {
							t.Fatal(err)
						}
						obj, ok := p.Scope().Lookup(m[1]).(*types.TypeName)
						if !ok {
							continue
						}
						typed = true
						if o, _, _ := types.LookupFieldOrMethod(addressed(obj.Type()), true, p, m[2]); o != nil {
							found = true
						}
					}
					if typed {
						checked++
					}
					if typed && !found {
						t.Errorf("%s:%d: no type %s has a field or method %s", rel(f), n, m[1], m[2])
					}
				}
				for _, m := range spanName.FindAllStringSubmatch(strings.Trim(span, "`"), -1) {
					path, ok := pkgs[m[1]]
					if !ok {
						continue
					}
					p, err := imp.Import(path)
					if err != nil {
						t.Fatal(err)
					}
					checked++
					obj := p.Scope().Lookup(m[2])
					if obj == nil {
						t.Errorf("%s:%d: %s.%s does not exist", rel(f), n, m[1], m[2])
						continue
					}
					if m[3] == "" {
						m[3] = m[4] // a field of a composite literal
					}
					if m[3] == "" {
						continue
					}
					if _, isType := obj.(*types.TypeName); !isType {
						continue
					}
					if o, _, _ := types.LookupFieldOrMethod(addressed(obj.Type()), true, p, m[3]); o == nil {
						t.Errorf("%s:%d: %s.%s has no field or method %s", rel(f), n, m[1], m[2], m[3])
					}
				}
			}
		})
	}
	if checked < 150 {
		t.Fatalf("checked %d names in the Markdown files' code spans, want the 185 they held: the patterns no longer find them", checked)
	}
}

// addressed is the type whose method set holds every method a value of t
// may call: *t, but an interface's own (a pointer to one has none).
func addressed(t types.Type) types.Type {
	if types.IsInterface(t) {
		return t
	}
	return types.NewPointer(t)
}
