// Command ratekit is the command-line tool for ratekit's configuration and
// rules. Each subcommand lives in its own file and registers itself in
// commands from an init function, so adding one touches no other file:
//
//	func init() {
//		commands["explain"] = command{
//			summary: "show which rule decides for an identifier",
//			usage:   "usage: ratekit explain [flags] ...",
//			run:     runExplain,
//		}
//	}
//
// Exit codes shared by every subcommand: 0 success, 1 the input is invalid
// (or the operation failed), 2 usage error or unreadable input.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/ratekit/ratekit/internal/suggest"
)

// Exit codes.
const (
	exitOK      = 0
	exitInvalid = 1
	exitUsage   = 2
)

// command is one subcommand.
type command struct {
	summary string // one line for `ratekit help`
	usage   string // full help: synopsis, flags, exit codes
	// run gets the arguments after the subcommand's name and returns the exit code.
	run func(ctx context.Context, out output, args []string) int
}

// output is where a command writes: results to stdout, diagnostics to stderr.
type output struct {
	stdout, stderr io.Writer
}

// commands is the registry, filled by init functions of the subcommand files.
var commands = map[string]command{}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], output{os.Stdout, os.Stderr})
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, out output) int {
	if len(args) == 0 {
		fmt.Fprint(out.stderr, overview())
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		return help(args[1:], out)
	case "-version", "--version":
		name = "version"
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(out.stderr, "ratekit: unknown command %q%s\n\n%s", name, suggest.Hint(name, commandNames()), overview())
		return exitUsage
	}
	return c.run(ctx, out, args[1:])
}

func help(args []string, out output) int {
	// -h after help's words asks for the help they name, as it does after
	// a command's: help -h is the overview, help rules -h the rules usage.
	if n := len(args); n > 0 && slices.Contains([]string{"-h", "-help", "--help"}, args[n-1]) {
		args = args[:n-1]
	}
	if len(args) == 0 || args[0] == "help" { // the overview lists help beside the commands
		if len(args) > 1 {
			fmt.Fprintf(out.stderr, "ratekit help: help has no subcommands; run ratekit help\n")
			return exitUsage
		}
		fmt.Fprint(out.stdout, overview())
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(out.stderr, "ratekit help: unknown command %q%s\n\n%s", args[0], suggest.Hint(args[0], commandNames()), overview())
		return exitUsage
	}
	// A command's usage covers its subcommands: help names one only to
	// reach it, so a word that names none is refused, not ignored.
	if len(args) > 1 {
		subs := subcommands[args[0]]
		if len(args) > 2 || !slices.Contains(subs, args[1]) {
			if subs == nil {
				fmt.Fprintf(out.stderr, "ratekit help: %s has no subcommands; run ratekit help %s\n", args[0], args[0])
			} else {
				fmt.Fprintf(out.stderr, "ratekit help: %s has no subcommand %q%s; run ratekit help %s\n", args[0], strings.Join(args[1:], " "), suggest.Hint(args[1], subs), args[0])
			}
			return exitUsage
		}
	}
	fmt.Fprintln(out.stdout, strings.TrimRight(c.usage, "\n"))
	return exitOK
}

func overview() string {
	names := make([]string, 0, len(commands))
	width := 0
	for n := range commands {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("ratekit: rate-limit configuration and rules.\n\nusage: ratekit COMMAND [flags]\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, n, commands[n].summary)
	}
	fmt.Fprintf(&b, "  %-*s  %s\n", width, "help", "show this list, or `ratekit help COMMAND` for a command's flags")
	b.WriteString("\nenvironment (a flag on the command line wins): " + envRedisURL + " (--redis), " + envService + " (--service),\n" +
		"  " + envKeyPrefix + " (--key-prefix), " + envRulesPrefix + " (--rules-prefix)\n")
	b.WriteString("\nexit codes: 0 success, 1 invalid input or failed operation, 2 usage error or unreadable input\n")
	return b.String()
}

// parsing, when set, is told every flag set parseFlags parses: tests list
// the flags a command defines with it.
var parsing func(*flag.FlagSet)

// parseFlags parses a subcommand's flags. It returns false with the exit code
// when the command should stop: 0 after -h, 2 after a usage error (reported
// with the command's usage on stderr).
func parseFlags(fs *flag.FlagSet, usage string, args []string, out output) (bool, int) {
	if parsing != nil {
		parsing(fs)
	}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintln(out.stdout, strings.TrimRight(usage, "\n"))
		return false, exitOK
	case err != nil:
		return false, usageError(out, usage, "%v%s", err, flagHint(fs, err))
	}
	return true, exitOK
}

// flagHint suggests the flag of fs closest to the one err says is not
// defined, for a typo such as --availble-limiters.
func flagHint(fs *flag.FlagSet, err error) string {
	if m := suggest.Flag(fs, err); m != "" {
		return fmt.Sprintf("; did you mean %q?", "--"+m)
	}
	return ""
}

// usageError reports a usage problem, with one line saying where the
// command's help is (not the whole help: the problem stays visible), and
// returns exitUsage.
func usageError(out output, usage, format string, args ...any) int {
	fmt.Fprintf(out.stderr, "ratekit: "+format+"\n", args...)
	fmt.Fprintf(out.stderr, "run '%s --help' for usage\n", usageName(usage))
	return exitUsage
}

// usageName returns the command a usage text is for: the lower-case words
// after "usage:" ("ratekit rules publish").
func usageName(usage string) string {
	words := strings.Fields(strings.TrimPrefix(usage, "usage:"))
	n := 0
	for n < len(words) && strings.Trim(words[n], "abcdefghijklmnopqrstuvwxyz") == "" {
		n++
	}
	if n == 0 {
		return "ratekit"
	}
	return strings.Join(words[:n], " ")
}
