package main

import (
	"testing"

	"github.com/ratekit/ratekit/bench/internal/cliflags/cliflagstest"
)

// boundary takes no arguments: -h prints its help on stdout (exit 0), and
// anything else is a usage error (exit 2) rather than ignored.
func TestParseArgs(t *testing.T) {
	cliflagstest.CheckCommand(t, "boundary", parseArgs)
}
