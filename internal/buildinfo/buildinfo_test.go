package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFormat(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.time", Value: "2026-12-01T00:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tt := range []struct {
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{bi, true, "x v1.2.3 (go1.26.0, revision abc 2026-12-01T00:00:00Z, modified)"},
		{&debug.BuildInfo{GoVersion: "go1.26.0"}, true, "x (devel) (go1.26.0)"},
		{nil, false, "x (unknown version: built without module information)"},
	} {
		if got := Format("x", tt.bi, tt.ok); got != tt.want {
			t.Errorf("Format = %q, want %q", got, tt.want)
		}
	}
}
