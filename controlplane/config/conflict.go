package config

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// conflictMarkers refuses a file that still holds the lines git leaves in it
// after an unresolved merge conflict. YAML would report a confusing syntax
// error for them, or none at all for a "=======" line inside a block scalar,
// and a half-merged file must never become a limiter's rules.
func conflictMarkers(file string, data []byte) error {
	if !bytes.Contains(data, []byte("<<<<<<<")) && !bytes.Contains(data, []byte("=======")) &&
		!bytes.Contains(data, []byte(">>>>>>>")) && !bytes.Contains(data, []byte("|||||||")) {
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		for _, m := range []string{"<<<<<<<", "|||||||", "=======", ">>>>>>>"} {
			if rest, ok := strings.CutPrefix(line, m); ok && (rest == "" || rest[0] == ' ') {
				return &ValidationError{Errors: []*Error{{File: file, Line: n,
					Message: fmt.Sprintf("unresolved merge conflict (line %s): resolve it and remove the conflict markers", quote(line))}}}
			}
		}
	}
	return nil
}
