package flock

import (
	"syscall"
	"testing"
)

func TestEpoll(t *testing.T) { _ = syscall.EpollCreate1 } // Linux's only: its test does not build on macOS
