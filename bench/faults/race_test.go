//go:build race

package faults

// raceEnabled shortens the load phases of the short form: under the race detector the test process
// (load generator and in-process simulator) runs several times slower on the same cores.
const raceEnabled = true
