// Package doccheck holds no code: its tests check the repository's
// documentation against the repository. Every relative link and anchor in a
// Markdown file, and every docs/*.md#anchor that a Go comment or a YAML file
// names, resolves; every Go block of a Markdown file, and every block of a
// library's package comment that parses as Go, type-checks against the
// packages it uses; every Go name a Markdown code span gives exists, and
// every constant docs/limits.md names has the value it gives.
package doccheck
