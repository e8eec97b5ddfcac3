package main

import (
	"context"
	"flag"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// definedFlags returns the flags (--name) the command that args run defines,
// as its flag set holds them, and --help.
func definedFlags(t *testing.T, args ...string) []string {
	t.Helper()
	var set *flag.FlagSet
	parsing = func(fs *flag.FlagSet) { set = fs }
	defer func() { parsing = nil }()
	if code := run(context.Background(), append(args, "--help"), output{io.Discard, io.Discard}); code != exitOK || set == nil {
		t.Fatalf("%q --help: exit %d, flag set %v", args, code, set)
	}
	flags := []string{"--help"}
	set.VisitAll(func(f *flag.Flag) { flags = append(flags, "--"+f.Name) })
	slices.Sort(flags)
	return flags
}

// commandTree is every command with the flags it defines and its
// subcommands, read from the commands themselves.
type commandTree map[string]struct {
	flags []string
	subs  []string
}

func readCommandTree(t *testing.T) commandTree {
	t.Helper()
	tree := commandTree{}
	for name := range commands {
		e := tree[name]
		e.subs = subcommands[name]
		if e.subs == nil {
			e.flags = definedFlags(t, name)
		}
		for _, sub := range e.subs { // every subcommand's flags
			for _, f := range definedFlags(t, name, sub) {
				if !slices.Contains(e.flags, f) {
					e.flags = append(e.flags, f)
				}
			}
		}
		slices.Sort(e.flags)
		tree[name] = e
	}
	return tree
}

// The bash completion offers, for each command, exactly its subcommands
// and the flags its flag set defines.
func TestCompletionOffersDefinedFlags(t *testing.T) {
	tree := readCommandTree(t)
	var script strings.Builder
	writeBash(&script, false)
	offered := map[string][]string{}
	for _, m := range regexp.MustCompile(`(?m)^    ([a-z]+)\) words="([^"]*)" ;;$`).FindAllStringSubmatch(script.String(), -1) {
		offered[m[1]] = strings.Fields(m[2])
	}
	for name, e := range tree {
		want := append(slices.Clone(e.subs), e.flags...)
		if name == "completion" {
			want = append(want, "bash", "zsh", "fish")
		}
		slices.Sort(want)
		got := slices.Sorted(slices.Values(offered[name]))
		if !slices.Equal(got, want) {
			t.Errorf("completion of %s offers %q, the command has %q", name, got, want)
		}
	}
	if got, want := offered["help"], commandNames(); !slices.Equal(got, want) {
		t.Errorf("completion of help offers %q, want the commands %q", got, want)
	}
}

// Every `ratekit ...` invocation in the repository's markdown names a
// command, a subcommand and flags that exist, spelt as the code spells them.
func TestDocsInvocations(t *testing.T) {
	tree := readCommandTree(t)
	// The checker fails what it should.
	for inv, want := range map[string]string{
		"rules publish --dryrun":        "no flag --dryrun",
		"rules lst":                     "no subcommand rules lst",
		"rules list|shw":                "no subcommand rules shw",
		"valdate --json":                "no command valdate",
		"help valdate":                  "help for no command valdate",
		"--service x":                   "a flag where the command goes",
		"clear --limiter L [--dry-run]": "",
		"explain -limiter L":            "",
	} {
		if got := strings.Join(tree.check(inv), "; "); want == "" && got != "" || !strings.HasPrefix(got, want) {
			t.Errorf("check(%q) = %q, want %q", inv, got, want)
		}
	}
	root := filepath.Join("..", "..")
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") && !strings.HasSuffix(path, ".md.jinja") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, inv := range invocations(string(b), tree) {
			found++
			for _, problem := range tree.check(inv) {
				t.Errorf("%s: `ratekit %s`: %s", rel, inv, problem)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 20 { // the README, the runbook, docs/ and the examples name many
		t.Fatalf("found %d invocations of ratekit in the markdown: the extraction is broken", found)
	}
}

var (
	fence      = regexp.MustCompile("(?ms)^ *```[^\n]*\n(.*?)^ *```")
	codeSpan   = regexp.MustCompile("`([^`]+)`")
	invocation = regexp.MustCompile(`(?:^|[\s/(])ratekit ([^|;#&]*)`)
	flagToken  = regexp.MustCompile(`(?:^|[\s\[(])(--?[a-z][a-z0-9-]*)`)
	word       = regexp.MustCompile(`^[a-z]+$`)
)

// invocations returns what follows "ratekit " in the code of a markdown
// document: its fenced blocks (a line ending in \ goes on; comments left
// out) and its code spans (which may span lines). A code span that starts
// with a command and a space, as the README's list of commands does
// (`validate --available-limiters F`), is one too.
func invocations(doc string, tree commandTree) []string {
	var code []string
	for _, m := range fence.FindAllStringSubmatch(doc, -1) {
		for _, line := range strings.Split(strings.ReplaceAll(m[1], "\\\n", " "), "\n") {
			line, _, _ = strings.Cut(line, " #") // a shell comment
			code = append(code, line)
		}
	}
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(fence.ReplaceAllString(doc, ""), -1) {
		span := strings.ReplaceAll(m[1], "\n", " ")
		code = append(code, span)
		if name, _, ok := strings.Cut(span, " "); ok && tree[name].flags != nil {
			out = append(out, span)
		}
	}
	for _, c := range code {
		for _, m := range invocation.FindAllStringSubmatch(c, -1) {
			if s := strings.TrimSpace(m[1]); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// check returns what is wrong with one invocation (the words after
// "ratekit").
func (tree commandTree) check(inv string) []string {
	words := strings.Fields(inv)
	name := words[0]
	switch {
	case name == "--version" || name == "-version" || name == "--help" || name == "-h":
		return nil
	case strings.HasPrefix(name, "-"):
		return []string{"a flag where the command goes"}
	case name == "help":
		if len(words) > 1 && word.MatchString(words[1]) {
			if _, ok := tree[words[1]]; !ok {
				return []string{"help for no command " + words[1]}
			}
		}
		return nil
	case !word.MatchString(name):
		return nil // a placeholder such as COMMAND
	}
	e, ok := tree[name]
	if !ok {
		return []string{"no command " + name}
	}
	var problems []string
	if e.subs != nil && len(words) > 1 && !strings.HasPrefix(words[1], "-") {
		for _, sub := range strings.Split(words[1], "|") { // rules list|show
			if word.MatchString(sub) && !slices.Contains(e.subs, sub) {
				problems = append(problems, "no subcommand "+name+" "+sub)
			}
		}
	}
	for _, m := range flagToken.FindAllStringSubmatch(inv, -1) {
		if f := "--" + strings.TrimLeft(m[1], "-"); !slices.Contains(e.flags, f) {
			problems = append(problems, "no flag "+m[1]+" (the command has "+strings.Join(e.flags, " ")+")")
		}
	}
	return problems
}
