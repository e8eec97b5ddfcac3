//go:build !race

package ratekitenvoy_test

const raceEnabled = false
