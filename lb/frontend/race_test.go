//go:build race

package frontend

// raceEnabled: the race detector allocates on its own (sync.Pool drops what it is given at random), so
// allocation counts through TLS are not checked under it.
const raceEnabled = true
