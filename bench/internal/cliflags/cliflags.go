// Package cliflags parses the command line of the bench module's commands
// the way the project's binaries do (cmd/ratekit): -h prints the help on
// stdout and exits 0; a flag mistake or an unexpected argument prints the
// problem and the help on stderr and exits 2.
package cliflags

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// Parse parses args into fs, which takes no positional arguments. It
// reports whether the command should run; when it should not, code is its
// exit status, and the help or the problem has been written.
func Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.Init(fs.Name(), flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the help goes where the outcome says
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, false
	case err == nil && fs.NArg() > 0:
		err = fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		fs.SetOutput(stderr)
		fs.Usage()
		return 2, false
	}
	return 0, true
}
