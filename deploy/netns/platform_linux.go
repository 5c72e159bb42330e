package netns

import (
	"errors"
	"syscall"
)

// platformCheck: namespaces are Linux's; see check for what else they need.
func platformCheck() error { return nil }

// alive: whether process pid still runs (Sweep leaves what it made).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
