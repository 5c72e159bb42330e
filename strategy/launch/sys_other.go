//go:build !linux

package launch

import (
	"os/exec"
	"syscall"
)

// sysProcAttr has no parent-death signal outside Linux: children are killed
// by Kill, Wait's context and the parent's own shutdown, but not when the
// parent is killed with SIGKILL.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func waitStatus(ee *exec.ExitError) (string, bool) { return "", false }

func killedBy(ee *exec.ExitError) (syscall.Signal, bool) { return 0, false }
