package main

import (
	"context"
	"flag"
	"fmt"
	"runtime/debug"

	"github.com/ratekit/ratekit/internal/buildinfo"
)

const versionUsage = `usage: ratekit version

Prints the ratekit module version the binary was built from ("(devel)" for
a build inside a checkout), the Go version, and the VCS revision and time
when the build recorded them.

exit codes: 0 success; 2 usage error`

func init() {
	commands["version"] = command{
		summary: "print the version the binary was built from",
		usage:   versionUsage,
		run:     runVersion,
	}
}

func runVersion(_ context.Context, out output, args []string) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	pos, ok, code := parseArgs(fs, versionUsage, args, out)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(out, versionUsage, "version takes no arguments, got %q", pos)
	}
	fmt.Fprintln(out.stdout, versionLine(debug.ReadBuildInfo()))
	return exitOK
}

// versionLine renders the build information: "ratekit VERSION (go VERSION,
// revision REV TIME, modified)".
func versionLine(bi *debug.BuildInfo, ok bool) string { return buildinfo.Format("ratekit", bi, ok) }
