package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository root: this package lives in internal/doccheck.
const root = "../.."

// skipDir lists directories whose Markdown is not the repository's own.
func skipDir(name string) bool {
	return name == ".git" || name == "node_modules" || name == "testdata" || name == "vendor"
}

var (
	fence   = regexp.MustCompile("^\\s*(```|~~~)")
	heading = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	// An inline link or image, [text](target "title"), and a reference
	// definition, [label]: target.
	inline  = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef  = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	codeRun = regexp.MustCompile("`+[^`]*`+")
	htmlID  = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	// A Markdown file named with an anchor in a Go or YAML file, relative
	// to the repository root: docs/design.md#tiers.
	mdRef = regexp.MustCompile(`(?:^|[\s(` + "`" + `])((?:[\w.-]+/)*[\w.-]+\.md)#([\w-]+)`)
)

// markdown is what a Markdown file offers and asks for.
type markdown struct {
	anchors map[string]bool
	links   []link
}

type link struct {
	line   int
	target string
}

// parse reads a Markdown file's headings (as GitHub's anchors) and links,
// leaving out fenced code blocks and code spans.
func parse(data []byte) markdown {
	md := markdown{anchors: map[string]bool{}}
	seen := map[string]int{}
	proseLines(data, func(n int, line string) {
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			md.anchors[m[1]] = true
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			a := slug(m[2])
			if k := seen[a]; k > 0 {
				md.anchors[fmt.Sprintf("%s-%d", a, k)] = true
			} else {
				md.anchors[a] = true
			}
			seen[a]++
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			md.links = append(md.links, link{n, m[1]})
			return
		}
		for _, m := range inline.FindAllStringSubmatch(codeRun.ReplaceAllString(line, ""), -1) {
			md.links = append(md.links, link{n, m[1]})
		}
	})
	return md
}

// proseLines calls f with each line of a Markdown file outside its fenced
// code blocks, and the line's number.
func proseLines(data []byte, f func(n int, line string)) {
	inFence := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if !inFence {
			f(n, line)
		}
	}
}

// slug is GitHub's anchor for a heading: lower case, markup and punctuation
// dropped, spaces turned into hyphens.
func slug(h string) string {
	h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1") // a link keeps its text
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && isLetter(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isLetter(r rune) bool { return strings.ToLower(string(r)) != strings.ToUpper(string(r)) }

// external reports whether a link leaves the repository: those are not checked.
func external(target string) bool {
	if strings.HasPrefix(target, "//") {
		return true
	}
	if i := strings.Index(target, ":"); i > 0 && !strings.ContainsAny(target[:i], "/#.") {
		return true // a scheme: https:, mailto:, ...
	}
	return false
}

// files walks the repository for files whose name ends in one of exts.
func files(t *testing.T, exts ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if slices.ContainsFunc(exts, func(e string) bool { return strings.HasSuffix(path, e) }) {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

// cache parses each Markdown file once.
type cache map[string]*markdown

func (c cache) get(path string) (*markdown, error) {
	path = filepath.Clean(path)
	if md, ok := c[path]; ok {
		return md, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	md := parse(data)
	c[path] = &md
	return &md, nil
}

// resolve reports why target, a link from the file at from, does not
// resolve, or "" when it does.
func (c cache) resolve(from, target string) string {
	path, anchor, _ := strings.Cut(target, "#")
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	file := from
	if path != "" {
		if strings.HasPrefix(path, "/") {
			file = filepath.Join(root, path)
		} else {
			file = filepath.Join(filepath.Dir(from), path)
		}
		if _, err := os.Stat(file); err != nil {
			return fmt.Sprintf("%s does not exist", rel(file))
		}
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(file, ".md") {
		return "" // an anchor into code (#L12) is GitHub's, not checked
	}
	md, err := c.get(file)
	if err != nil {
		return err.Error()
	}
	if !md.anchors[anchor] {
		return fmt.Sprintf("%s has no heading #%s", rel(file), anchor)
	}
	return ""
}

func rel(path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(r)
}

// Every relative link in a Markdown file names a file that exists and, with
// an anchor, a heading of that file.
func TestMarkdownLinks(t *testing.T) {
	c := cache{}
	mds := files(t, ".md", ".md.jinja")
	if len(mds) < 10 {
		t.Fatalf("found %d Markdown files under %s, want the repository's (README.md, docs/, ...)", len(mds), root)
	}
	checked := 0
	for _, f := range mds {
		md, err := c.get(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range md.links {
			if external(l.target) || strings.Contains(l.target, "{{") {
				continue // the web, or a template's placeholder
			}
			checked++
			if why := c.resolve(f, l.target); why != "" {
				t.Errorf("%s:%d: link %s: %s", rel(f), l.line, l.target, why)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link checked: the parser finds none")
	}
}

// A Go comment or a YAML file that names a Markdown file of the repository
// with an anchor (docs/design.md#tiers) names a heading that exists.
func TestCodeRefersToHeadings(t *testing.T) {
	c := cache{}
	checked := 0
	for _, f := range files(t, ".go", ".yaml", ".yml", ".jinja") {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(data), "\n") {
			for _, m := range mdRef.FindAllStringSubmatch(line, -1) {
				file := filepath.Join(root, m[1])
				if _, err := os.Stat(file); err != nil {
					file = filepath.Join(filepath.Dir(f), m[1]) // relative to the file
				}
				if _, err := os.Stat(file); err != nil {
					continue // not a file of this repository (a generated service's docs/)
				}
				checked++
				if why := c.resolve(file, "#"+m[2]); why != "" {
					t.Errorf("%s:%d: %s#%s: %s", rel(f), n+1, m[1], m[2], why)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no reference checked: the pattern finds none")
	}
}

// The checker itself: anchors as GitHub makes them, links outside code.
func TestParse(t *testing.T) {
	tests := []struct {
		name        string
		md          string
		wantAnchors []string
		wantLinks   []string
	}{
		{
			name:        "headings",
			md:          "# ratekit design notes\n## What a check costs (Redis)\n### `Check` and Peek\n## Fail-open\n## Fail-open\n",
			wantAnchors: []string{"ratekit-design-notes", "what-a-check-costs-redis", "check-and-peek", "fail-open", "fail-open-1"},
		},
		{
			name:        "code is not markup",
			md:          "```sh\n# not a heading\n[a](gone.md)\n```\n`[b](gone.md)` [c](here.md#x)\n",
			wantAnchors: []string{},
			wantLinks:   []string{"here.md#x"},
		},
		{
			name:        "reference definition and title",
			md:          "[x]: docs/limits.md\nsee [y](../a.md \"A\") and ![img](fig.png)\n<a name=\"custom\"></a>\n",
			wantAnchors: []string{"custom"},
			wantLinks:   []string{"docs/limits.md", "../a.md", "fig.png"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := parse([]byte(tt.md))
			var anchors []string
			for a := range md.anchors {
				anchors = append(anchors, a)
			}
			var links []string
			for _, l := range md.links {
				links = append(links, l.target)
			}
			slices.Sort(anchors)
			want := slices.Sorted(slices.Values(tt.wantAnchors))
			if !slices.Equal(anchors, want) {
				t.Errorf("anchors = %q, want %q", anchors, want)
			}
			if !slices.Equal(links, tt.wantLinks) {
				t.Errorf("links = %q, want %q", links, tt.wantLinks)
			}
		})
	}
}

func TestExternal(t *testing.T) {
	tests := []struct {
		target string
		want   bool
	}{
		{"https://github.com/redis/rueidis", true},
		{"mailto:a@example.com", true},
		{"//example.com/x", true},
		{"docs/design.md", false},
		{"#lint", false},
		{"../docs/design.md#cost", false},
	}
	for _, tt := range tests {
		if got := external(tt.target); got != tt.want {
			t.Errorf("external(%q) = %v, want %v", tt.target, got, tt.want)
		}
	}
}
