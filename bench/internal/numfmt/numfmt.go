// Package numfmt formats the figures of the bench module's tables.
package numfmt

import (
	"fmt"
	"strings"
)

// Thousands formats v rounded to an integer with comma separators.
func Thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
