package launch

import (
	"fmt"
	"os/exec"
	"syscall"
)

// sysProcAttr kills the child when the thread that started it (kept alive
// for the child's lifetime, see Start) ends: the parent's death.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

func waitStatus(ee *exec.ExitError) (string, bool) {
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok {
		return "", false
	}
	if ws.Signaled() {
		return fmt.Sprintf("was killed by signal %v", ws.Signal()), true
	}
	return fmt.Sprintf("exited with status %d", ws.ExitStatus()), true
}

func killedBy(ee *exec.ExitError) (syscall.Signal, bool) {
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return ws.Signal(), true
}
