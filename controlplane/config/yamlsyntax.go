package config

import (
	"bytes"
	"fmt"
	"strings"
)

// maxLocateParses bounds the re-parses locateSyntaxError spends on one
// invalid file (each reads at most MaxFileSize bytes): past it, the
// parser's own line is reported.
const maxLocateParses = 200

// locateSyntaxError finds where a YAML syntax error really is. The parser
// reports the line where the enclosing block starts (a line indented one
// space too few, on line 6, is "line 2: did not find expected '-'
// indicator"); the first line whose addition makes the document fail the
// same way is the culprit. A tab in the indentation is named as such.
// It returns line 0 when it cannot do better than the parser; the hint may
// be empty.
func locateSyntaxError(data []byte, reported int, msg string) (line, col int, hint string) {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if l, c, ok := indentTab(lines); ok {
		return l, c, "a tab in the indentation: YAML indents with spaces only; replace it with spaces"
	}
	if reported < 1 || reported > len(lines) {
		return 0, 0, ""
	}
	prefix := bytes.Join(lines[:reported-1], nil)
	for k := reported; k <= len(lines) && k < reported+maxLocateParses; k++ {
		prefix = append(prefix, lines[k-1]...)
		_, err := parseYAML(prefix)
		if err == nil {
			continue
		}
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m == nil || m[2] != msg {
			return 0, 0, "" // a different failure: the prefix is merely incomplete
		}
		text := string(lines[k-1])
		indent := len(text) - len(strings.TrimLeft(text, " "))
		if k == reported {
			return k, indent + 1, "" // the parser's line was right
		}
		return k, indent + 1, fmt.Sprintf("check the indentation of this line (%d spaces) against the lines above", indent)
	}
	return 0, 0, ""
}

// indentTab returns the first tab in the leading whitespace of a line.
func indentTab(lines [][]byte) (line, col int, ok bool) {
	for i, l := range lines {
		for j, c := range l {
			if c == '\t' {
				return i + 1, j + 1, true
			}
			if c != ' ' {
				break
			}
		}
	}
	return 0, 0, false
}
