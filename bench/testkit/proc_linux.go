package testkit

import "syscall"

// DieWithTest makes a child get SIGKILL if the test process dies first (a -timeout panic, a kill), so
// that no child outlives the test run; t.Cleanup ends them in every other case.
func DieWithTest() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
