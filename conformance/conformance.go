// Package conformance holds ratekit's evaluation semantics as data: YAML
// scenario files (rules, a timed sequence of operations, expected results)
// that every store of this repository runs (core/storetest), and that an SDK
// in another language runs to prove it answers alike. README.md in this
// directory documents the format.
package conformance

import (
	"embed"
	"io/fs"
)

//go:embed scenarios/*.yaml
var files embed.FS

// Scenarios returns the scenario files, named <name>.yaml at the root of
// the returned file system.
func Scenarios() fs.FS {
	sub, err := fs.Sub(files, "scenarios")
	if err != nil {
		panic(err) // the embedded directory exists: a build without it fails earlier
	}
	return sub
}
