//go:build !race

package nbio

const raceEnabled = false
