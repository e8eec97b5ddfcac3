// Package buildinfo renders what a ratekit binary was built from, the same
// way for every command's -version.
package buildinfo

import "runtime/debug"

// Line returns "NAME VERSION (go VERSION, revision REV TIME, modified)" for
// the running binary.
func Line(name string) string {
	bi, ok := debug.ReadBuildInfo()
	return Format(name, bi, ok)
}

// Format renders bi (ok false: the binary has no module information). The
// version is the main module's, "(devel)" for a build inside a checkout.
func Format(name string, bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return name + " (unknown version: built without module information)"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	s := name + " " + version + " (" + bi.GoVersion
	settings := map[string]string{}
	for _, kv := range bi.Settings {
		settings[kv.Key] = kv.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		s += ", revision " + rev
		if t := settings["vcs.time"]; t != "" {
			s += " " + t
		}
		if settings["vcs.modified"] == "true" {
			s += ", modified"
		}
	}
	return s + ")"
}
