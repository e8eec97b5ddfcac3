//go:build race

package redisstore

// raceEnabled: the race detector makes sync.Pool drop a share of what is put
// back, so allocation counts are higher in -race builds.
const raceEnabled = true
