//go:build race

package ratekitenvoy_test

// raceEnabled: the race detector is on, and sync.Pool drops some of what is
// put into it, so allocation bounds are looser.
const raceEnabled = true
