package launch

import (
	"fmt"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
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
		return "was killed by " + signalWords(ws.Signal()), true
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

// signalWords names a signal as kill(1) and torchrun do, with its number:
// "SIGKILL (signal 9)", not Go's "signal killed".
func signalWords(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return fmt.Sprintf("%s (signal %d)", name, int(sig))
	}
	return fmt.Sprintf("signal %d (%v)", int(sig), sig)
}
