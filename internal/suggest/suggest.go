// Package suggest finds the name a user probably meant, for the "did you
// mean" hints of the config decoder and the CLI.
package suggest

import "math"

// MaxLen bounds the strings Distance compares: longer ones are never typos of
// a schema or property name, and the bound keeps the quadratic work small on
// input a client controls.
const MaxLen = 64

// Distance is the Levenshtein distance of a and b (byte-wise), or math.MaxInt
// when either is longer than MaxLen.
func Distance(a, b string) int {
	if len(a) > MaxLen || len(b) > MaxLen {
		return math.MaxInt
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
