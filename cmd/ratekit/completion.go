package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
)

const completionUsage = `usage: ratekit completion bash|zsh|fish

Prints a shell completion script for ratekit's commands and their flags.

  source <(ratekit completion bash)          # bash, e.g. in ~/.bashrc
  source <(ratekit completion zsh)           # zsh, e.g. in ~/.zshrc
  ratekit completion fish | source           # fish, or save it as
      ~/.config/fish/completions/ratekit.fish

exit codes: 0 success; 2 usage error`

func init() {
	commands["completion"] = command{
		summary: "print a shell completion script (bash, zsh, fish)",
		usage:   completionUsage,
		run:     runCompletion,
	}
}

func runCompletion(_ context.Context, out output, args []string) int {
	fs := flag.NewFlagSet("completion", flag.ContinueOnError)
	pos, ok, code := parseArgs(fs, completionUsage, args, out)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(out, completionUsage, "completion needs one shell: bash, zsh or fish")
	}
	switch pos[0] {
	case "bash":
		writeBash(out.stdout, false)
	case "zsh":
		writeBash(out.stdout, true)
	case "fish":
		writeFish(out.stdout)
	default:
		return usageError(out, completionUsage, "no completion for shell %q: bash, zsh or fish", pos[0])
	}
	return exitOK
}

// subcommands are the subcommands of the commands that have them.
var subcommands = map[string][]string{
	"rules":   rulesCommands,
	"rollout": {"gate"},
}

var usageFlag = regexp.MustCompile(`(?m)^\s+(--[a-z][a-z-]*)`)

// commandFlags returns the flags a command's usage documents.
func commandFlags(name string) []string {
	var flags []string
	for _, m := range usageFlag.FindAllStringSubmatch(commands[name].usage, -1) {
		if !slices.Contains(flags, m[1]) {
			flags = append(flags, m[1])
		}
	}
	return append(flags, "--help")
}

func commandNames() []string {
	names := []string{"help"}
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// writeBash writes a bash completion function; zsh runs it through
// bashcompinit.
func writeBash(w io.Writer, zsh bool) {
	if zsh {
		fmt.Fprintln(w, "autoload -U +X bashcompinit && bashcompinit")
	}
	fmt.Fprintf(w, `_ratekit() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W %q -- "$cur"))
    return
  fi
  local words=
  case ${COMP_WORDS[1]} in
`, strings.Join(commandNames(), " "))
	for _, n := range commandNames() {
		if n == "help" {
			fmt.Fprintf(w, "    help) words=%q ;;\n", strings.Join(commandNames(), " "))
			continue
		}
		words := commandFlags(n)
		if subs := subcommands[n]; subs != nil {
			words = append(slices.Clone(subs), words...)
		}
		if n == "completion" {
			words = append([]string{"bash", "zsh", "fish"}, words...)
		}
		fmt.Fprintf(w, "    %s) words=%q ;;\n", n, strings.Join(words, " "))
	}
	fmt.Fprint(w, `  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _ratekit ratekit
`)
}

func writeFish(w io.Writer) {
	fmt.Fprintln(w, "complete -c ratekit -f")
	for _, n := range commandNames() {
		summary := "show a command's flags"
		if c, ok := commands[n]; ok {
			summary = c.summary
		}
		fmt.Fprintf(w, "complete -c ratekit -n __fish_use_subcommand -a %s -d %s\n", n, fishQuote(summary))
		if n == "help" {
			continue
		}
		for _, f := range commandFlags(n) {
			fmt.Fprintf(w, "complete -c ratekit -n '__fish_seen_subcommand_from %s' -l %s\n", n, strings.TrimPrefix(f, "--"))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(subcommands)) {
		fmt.Fprintf(w, "complete -c ratekit -n '__fish_seen_subcommand_from %s' -a '%s'\n", n, strings.Join(subcommands[n], " "))
	}
	fmt.Fprintln(w, "complete -c ratekit -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'")
}

func fishQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
