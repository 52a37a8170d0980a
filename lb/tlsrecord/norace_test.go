//go:build !race

package tlsrecord

const raceEnabled = false
