package doccheck

import (
	"fmt"
	"go/constant"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// limitPackages maps the packages whose constants docs/limits.md names to
// their import paths.
var limitPackages = map[string]string{
	"ratelimit":    "github.com/ratekit/ratekit/core",
	"config":       "github.com/ratekit/ratekit/controlplane/config",
	"rulestore":    "github.com/ratekit/ratekit/controlplane/rulestore",
	"rollout":      "github.com/ratekit/ratekit/controlplane/rollout",
	"observe":      "github.com/ratekit/ratekit/observability/observe",
	"admin":        "github.com/ratekit/ratekit/pages/admin",
	"rulesserver":  "github.com/ratekit/ratekit/controlplane/remoterules/rulesserver",
	"rulecheck":    "github.com/ratekit/ratekit/internal/rulecheck",
	"ratekitenvoy": "github.com/ratekit/ratekit/envoy",
	"remoterules":  "github.com/ratekit/ratekit/controlplane/remoterules",
	"servers":      "github.com/ratekit/ratekit/internal/servers",
}

var (
	// constRef is an exported name of a package in a code span:
	// `config.MaxLimiters` (not `rulestore.Options.GCScanKeys`).
	constRef = regexp.MustCompile("`(\\w+)\\.([A-Z]\\w*)`")
	// valueAfter is a name followed by its value: `admin.MaxBodyBytes` (64
	// KiB), `rulestore.DefaultGCScanKeys`: 65,536 keys.
	valueAfter = regexp.MustCompile("`(\\w+)\\.([A-Z]\\w*)`(?: \\(|: )(\\d[^)`;]*)")
	// number is a number as docs/limits.md writes one: 1024, 65,536, 2^40,
	// 2^53 − 1, 1 MiB, 64 KiB; not a part of 1.5 or 2^30.
	number = regexp.MustCompile(`(?:^|[^\w.,^])(\d{1,3}(?:,\d{3})+|\d+)(?:\^(\d+)(\s*[−-]\s*1\b)?)?(?:\s*(MiB|KiB)\b)?`)
)

// numbers returns the values of the numbers text writes, in order.
func numbers(text string) []int64 {
	var out []int64
	for _, ix := range number.FindAllStringSubmatchIndex(text, -1) {
		if rest := text[ix[1]:]; len(rest) > 1 && (rest[0] == '.' || rest[0] == ',') && rest[1] >= '0' && rest[1] <= '9' {
			continue // 1.5: no integer
		}
		m := make([]string, len(ix)/2)
		for i := range m {
			if ix[2*i] >= 0 {
				m[i] = text[ix[2*i]:ix[2*i+1]]
			}
		}
		v, err := strconv.ParseInt(strings.ReplaceAll(m[1], ",", ""), 10, 64)
		if err != nil {
			continue
		}
		if m[2] != "" {
			exp, _ := strconv.Atoi(m[2])
			if v != 2 || exp > 62 {
				continue // 10^19: prose, not a bound
			}
			v = 1 << exp
			if m[3] != "" {
				v--
			}
		}
		switch m[4] {
		case "MiB":
			v <<= 20
		case "KiB":
			v <<= 10
		}
		out = append(out, v)
	}
	return out
}

// The numbers of docs/limits.md are the constants' it names: each constant
// of a row of its bounds table has its value in that row's constant or value
// cell, a constant followed by a value ("`admin.MaxBodyBytes` (64 KiB)") has
// that value, and every constant it names exists. A bound changed in the code
// and not in the text (or the reverse) fails here.
func TestLimitsMatchConstants(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the packages that hold the bounds")
	}
	data, err := os.ReadFile(filepath.Join(root, "docs", "limits.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	files := exportDataOf(t, limitPackages)
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := files[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	// value returns the integer value of pkg.name, ok false when it is no
	// integer constant (a function, an error, a string).
	value := func(pkg, name string) (v int64, ok bool, err error) {
		p, err := imp.Import(limitPackages[pkg])
		if err != nil {
			return 0, false, err
		}
		obj := p.Scope().Lookup(name)
		if obj == nil {
			return 0, false, fmt.Errorf("%s.%s does not exist", pkg, name)
		}
		c, isConst := obj.(*types.Const)
		if !isConst || c.Val().Kind() != constant.Int {
			return 0, false, nil
		}
		v, exact := constant.Int64Val(c.Val())
		return v, exact, nil
	}

	named := 0
	for _, m := range constRef.FindAllStringSubmatch(text, -1) {
		if _, known := limitPackages[m[1]]; !known {
			continue
		}
		named++
		if _, _, err := value(m[1], m[2]); err != nil {
			t.Errorf("docs/limits.md names `%s.%s`: %v", m[1], m[2], err)
		}
	}

	rows := 0
	for n, line := range strings.Split(text, "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| ") || len(cells) != 6 || cells[2] == " constant " {
			continue // not a row of the bounds table (four cells), or its header
		}
		constCell, valueCell := strings.TrimSpace(cells[2]), cells[3]
		if strings.HasPrefix(constCell, "none") {
			continue // an unexported bound, or one of another's
		}
		for _, m := range constRef.FindAllStringSubmatch(constCell, -1) {
			if _, known := limitPackages[m[1]]; !known {
				continue
			}
			v, ok, err := value(m[1], m[2])
			if err != nil || !ok {
				continue
			}
			rows++
			vals := numbers(constCell + " " + valueCell)
			if !slices.Contains(vals, v) {
				t.Errorf("docs/limits.md:%d: `%s.%s` is %d, which the row does not say (it says %v)", n+1, m[1], m[2], v, vals)
			}
		}
	}

	pairs := 0
	for _, m := range valueAfter.FindAllStringSubmatch(text, -1) {
		if _, known := limitPackages[m[1]]; !known {
			continue
		}
		v, ok, err := value(m[1], m[2])
		if err != nil || !ok {
			continue
		}
		pairs++
		if vals := numbers(m[3]); len(vals) == 0 || vals[0] != v {
			t.Errorf("docs/limits.md: `%s.%s` is %d, the text says %q", m[1], m[2], v, m[3])
		}
	}
	// The patterns find what the document holds today: a change of its
	// layout that hides its numbers from them fails here, not silently.
	if named < 40 || rows < 20 || pairs < 3 {
		t.Fatalf("docs/limits.md: %d constants named, %d checked against their rows, %d against the value after them: the patterns no longer find them", named, rows, pairs)
	}
}

// The harness itself: numbers reads each way the document writes one.
func TestNumbers(t *testing.T) {
	tests := []struct {
		text string
		want []int64
	}{
		{"1024 (4 × 256)", []int64{1024, 4, 256}},
		{"65,536 keys, 64 `SCAN`s", []int64{65536, 64}},
		{"2^53 − 1", []int64{1<<53 - 1}},
		{"2^40; 2^30 − 1 where", []int64{1 << 40, 1<<30 - 1}},
		{"1 MiB and 16 KiB", []int64{1 << 20, 16 << 10}},
		{"1.5 bytes, 10^19, r256", nil},
	}
	for _, tt := range tests {
		if got := numbers(tt.text); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("numbers(%q) = %v, want %v", tt.text, got, tt.want)
		}
	}
}
