// Package suggest finds the name a user probably meant, for the "did you
// mean" hints of the config decoder and the CLI.
package suggest

import (
	"flag"
	"fmt"
	"math"
	"strings"
)

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

// Closest returns the candidate within two edits of word, the first of the
// closest, for a typo; "" when none is, or when word is so short that any
// name is as near ("" or "x" is not a typo of anything).
func Closest(word string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := Distance(word, c); d < bestD && d < len(word) {
			best, bestD = c, d
		}
	}
	return best
}

// Hint is the "did you mean" tail of an error about word: `; did you mean
// "NAME"?` with the closest of candidates (Closest), or "" when none is.
func Hint(word string, candidates []string) string {
	if best := Closest(word, candidates); best != "" {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	return ""
}

// Flag returns the name of the flag of fs closest to the one err, from
// fs.Parse, says is not defined, for a typo such as -redis-ulr; "" for any
// other error, or when no name is close.
func Flag(fs *flag.FlagSet, err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return ""
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return Closest(name, names)
}
