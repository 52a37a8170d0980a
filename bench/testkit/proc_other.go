//go:build !linux

package testkit

import "syscall"

// DieWithTest is Linux's parent-death signal, which other systems lack: there a child outlives a test
// process that dies first (a -timeout panic, a kill); t.Cleanup ends it in every other case.
func DieWithTest() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
