// Package soak holds fairlead's soak test (soak_test.go): minutes of mixed HTTP and WebSocket tunnel
// traffic through a real fairlead process (built from ./cmd/fairlead) in front of the simulated cluster
// (bench/sim, in the test process), with a leader switch and a connection server restart on the way,
// checking that fairlead's resident memory, goroutines and open file descriptors come back to their
// baseline once the load stops and idle connections have timed out.
//
// It is not part of `make test` or CI: it runs only when given a duration,
//
//	go test ./bench/soak -run Soak -soak.duration 5m -v -timeout 0
//	make soak SOAK=5m
//
// and skips otherwise. It only uses 127.0.0.1.
package soak
